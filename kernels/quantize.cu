/* quantize.cu — fused scale + cast + amax (fp32/bf16/fp16 → E4M3/E5M2), per tensor and per row, and
 * the dequantize kernel. Maths: q[i] = fp8(x[i]·s) with RNE and the saturate or IEEE overflow policy
 * (fp8_cvt.h); amax = max |x| over the *unscaled* source, NaN ignored; counters: underflow (x ≠ 0
 * whose code is ±0), saturated (non-NaN x, ±inf included, whose x·s rounds past the largest finite code), nan
 * (NaN x). Dequantize:
 * y = decode(q)·s_inv in fp32, then RNE to the output dtype.
 * Layouts: contiguous row-major; per-row means the tensor viewed as [outer, len, inner] with one
 * scale per middle index (axis 0 of a 2-D tensor: outer = 1, len = rows, inner = cols): a block per row of
 * [outer·len, inner] when the rows are long, a thread per column of [outer, len·inner] when they are short
 * (axis 1 of a 2-D tensor: inner = 1, the per-column casts of rowwise scaling's backward).
 * An amax pass (no destination: the first of current scaling's two) computes only the amax; its counters stay 0.
 * Tolerance: bit-exact with the CPU (bytes, amax and counters); tests/c/test_gpu_quantize.c. */
#include "cuda_common.cuh"

namespace {

constexpr int kThreads = 256;

/* One element: the cast (WRITE) or, in an amax pass, only |x| into acc.amax: that pass's bytes and counters
 * are thrown away (its scales come from the amax alone), so it skips the encode and the counting. The same
 * fmaxf as quant_one's, so the same amax bits. */
template <int FMT, bool IEEE, bool WRITE>
FL_HD uint8_t cast_or_amax(float x, float scale, Acc &acc) {
    if (!WRITE) {
        acc.amax = fmaxf(acc.amax, fabsf(x));
        return 0;
    }
    return quant_one<FMT, IEEE>(x, scale, acc);
}

/* Cast elements [begin, end) striding by `stride` from `tid`; with vec, 16-byte loads and
 * VEC-byte stores (begin must then be a multiple of VEC and the pointers aligned). */
template <int SRC, int FMT, bool IEEE, bool WRITE>
__device__ __forceinline__ void quant_range(const typename SrcT<SRC>::T *src, uint8_t *dst, size_t begin,
                                            size_t end, size_t tid, size_t stride, float scale, bool vec,
                                            Acc &acc) {
    typedef typename SrcT<SRC>::T T;
    constexpr int VEC = 16 / (int)sizeof(T);
    size_t tail = begin;
    if (vec) {
        size_t vb = begin / VEC, ve = end / VEC;
        for (size_t v = vb + tid; v < ve; v += stride) {
            uint4 raw = __ldg(reinterpret_cast<const uint4 *>(src) + v);
            const T *e = reinterpret_cast<const T *>(&raw);
            uint32_t w[2] = { 0, 0 };           /* the VEC output bytes, packed little-endian */
#pragma unroll
            for (int k = 0; k < VEC; k++)
                w[k >> 2] |= (uint32_t)cast_or_amax<FMT, IEEE, WRITE>(SrcT<SRC>::f(e[k]), scale, acc) << (8 * (k & 3));
            if (WRITE) {
                if (VEC == 4) *reinterpret_cast<uint32_t *>(dst + v * VEC) = w[0];
                else *reinterpret_cast<uint2 *>(dst + v * VEC) = make_uint2(w[0], w[1]);
            }
        }
        tail = ve * VEC;
    }
    for (size_t i = tail + tid; i < end; i += stride) {
        uint8_t q = cast_or_amax<FMT, IEEE, WRITE>(SrcT<SRC>::f(src[i]), scale, acc);
        if (WRITE) dst[i] = q;
    }
}

template <int SRC, int FMT, bool IEEE, bool WRITE>
__global__ void __launch_bounds__(kThreads) quantize_kernel(const typename SrcT<SRC>::T *src, uint8_t *dst,
                                                            size_t n, float scale, const float *dscale, bool vec,
                                                            fl_cuda_qstats *st) {
    if (dscale) scale = *dscale;   /* a scale the device derived (current scaling) */
    Acc acc{0.0f, 0, 0, 0};
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    quant_range<SRC, FMT, IEEE, WRITE>(src, dst, 0, n, tid, stride, scale, vec, acc);
    acc = block_reduce(acc);
    if (threadIdx.x == 0) flush(acc, st);
}

/* total += acc: the counters summed, the amax the larger. */
FL_HD void acc_add(Acc &total, const Acc &acc) {
    total.underflow += acc.underflow;
    total.saturated += acc.saturated;
    total.nan += acc.nan;
    total.amax = fmaxf(total.amax, acc.amax);
}

/* One block per row (grid-stride over rows): row r of [outer*len] uses scales[r % len]. */
template <int SRC, int FMT, bool IEEE, bool WRITE>
__global__ void __launch_bounds__(kThreads) quantize_rows_kernel(const typename SrcT<SRC>::T *src, uint8_t *dst,
                                                                 size_t rows, size_t len, size_t inner,
                                                                 const float *scales, bool vec,
                                                                 fl_cuda_qstats *st, unsigned int *row_amax) {
    Acc total{0.0f, 0, 0, 0};
    for (size_t row = blockIdx.x; row < rows; row += gridDim.x) {
        size_t r = row % len;
        float scale = scales ? scales[r] : 1.0f;
        Acc acc{0.0f, 0, 0, 0};
        quant_range<SRC, FMT, IEEE, WRITE>(src, dst, row * inner, row * inner + inner, threadIdx.x, blockDim.x,
                                           scale, vec, acc);
        acc_add(total, acc);
        float ra = block_reduce(Acc{acc.amax, 0, 0, 0}).amax;
        if (threadIdx.x == 0 && ra > 0.0f) atomicMax(row_amax + r, __float_as_uint(ra));
    }
    total = block_reduce(total);
    if (threadIdx.x == 0) flush(total, st);
}

/* The same cast for a small `inner` (per-column scales of a 2-D tensor: inner = 1), where a block per row would
 * run one block reduction and one atomic per element: the tensor viewed as [outer, width = len·inner], each
 * thread owns column j (scale j / inner) of a tile of kThreads adjacent columns, so a warp reads a row's
 * adjacent elements, and walks a chunk of `chunk` rows; one atomic per column and chunk for the amax. Work
 * items (tile, chunk) grid-stride, tile fastest. Same elements, same quant_one, so the same bytes and
 * statistics as the rows kernel. cols_geometry and cols_item are shared with the host run that tests them
 * (fl_cuda_quantize_cols_host). */
struct ColsGeometry {
    size_t width, ntile, chunk, items;
    unsigned grid;
};

/* About 16 blocks an SM: chunks of rows small enough to give every tile of columns that many, but at least
 * kMinChunk rows (narrow tensors: the char GPT's 256 columns would otherwise get chunks of one row, one atomic
 * per element). */
constexpr size_t kMinChunk = 16;
ColsGeometry cols_geometry(size_t outer, size_t len, size_t inner, int sms) {
    ColsGeometry g;
    g.width = len * inner;
    g.ntile = (g.width + kThreads - 1) / kThreads;
    const size_t want = (size_t)(sms > 0 ? sms : 1) * 16, per_tile = want > g.ntile ? want / g.ntile : 1;
    g.chunk = (outer + per_tile - 1) / per_tile;
    if (g.chunk < kMinChunk) g.chunk = outer < kMinChunk ? outer : kMinChunk;
    if (g.chunk == 0) g.chunk = 1;
    g.items = g.ntile * ((outer + g.chunk - 1) / g.chunk);
    g.grid = (unsigned)(g.items < want ? g.items : want);
    if (g.grid == 0) g.grid = 1;
    return g;
}

/* Work item `it` of thread `tid`: casts its column's chunk into acc (a fresh one); *r its scale index. False
 * when the column is past the tensor's width (the thread has nothing in this item). */
template <int SRC, int FMT, bool IEEE, bool WRITE>
FL_HD bool cols_item(const typename SrcT<SRC>::T *__restrict__ src, uint8_t *__restrict__ dst, size_t outer, const ColsGeometry &g,
                     size_t inner, const float *scales, size_t it, size_t tid, Acc &acc, size_t *r) {
    const size_t j = (it % g.ntile) * kThreads + tid, o0 = (it / g.ntile) * g.chunk;
    if (j >= g.width) return false;
    const size_t o1 = o0 + g.chunk < outer ? o0 + g.chunk : outer;
    *r = j / inner;
    const float scale = scales ? scales[*r] : 1.0f;
    size_t i = o0 * g.width + j;
#pragma unroll 4
    for (size_t o = o0; o < o1; o++, i += g.width) {
        uint8_t q = cast_or_amax<FMT, IEEE, WRITE>(SrcT<SRC>::f(src[i]), scale, acc);
        if (WRITE) dst[i] = q;
    }
    return true;
}

template <int SRC, int FMT, bool IEEE, bool WRITE>
__global__ void __launch_bounds__(kThreads) quantize_cols_kernel(const typename SrcT<SRC>::T *__restrict__ src,
                                                                 uint8_t *__restrict__ dst,
                                                                 size_t outer, ColsGeometry g, size_t inner,
                                                                 const float *scales, fl_cuda_qstats *st,
                                                                 unsigned int *row_amax) {
    Acc total{0.0f, 0, 0, 0};
    for (size_t it = blockIdx.x; it < g.items; it += gridDim.x) {   /* no block-wide step inside this loop */
        Acc acc{0.0f, 0, 0, 0};
        size_t r;
        if (!cols_item<SRC, FMT, IEEE, WRITE>(src, dst, outer, g, inner, scales, it, threadIdx.x, acc, &r)) continue;
        acc_add(total, acc);
        if (acc.amax > 0.0f) atomicMax(row_amax + r, __float_as_uint(acc.amax));
    }
    total = block_reduce(total);
    if (threadIdx.x == 0) flush(total, st);
}

/* scale[i] (when scale is non-NULL) and scale_inv[i] = 1/scale for i < n: from amax_bits[i] by the
 * current rule (scale_rule.h fl_amax_to_scale_current), or given[i], or value. */
__global__ void __launch_bounds__(kThreads) scales_kernel(size_t n, const unsigned int *amax_bits, const float *given,
                                                          float value, float fmt_max, int margin, bool pow2, float *scale,
                                                          float *scale_inv) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float s;
        if (amax_bits) {
            float a = __uint_as_float(amax_bits[i]);
            s = fl_amax_to_scale_current(a, fmt_max, margin, pow2);
        } else {
            s = given ? given[i] : value;
        }
        if (scale) scale[i] = s;
        scale_inv[i] = fl_fdiv(1.0f, s);
    }
}

template <int FMT, int DST>
__global__ void __launch_bounds__(kThreads) dequantize_kernel(const uint8_t *q, void *dst, size_t n,
                                                              const float *scale_inv, size_t len, size_t inner) {
    typedef FmtT<FMT> F;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    float s0 = scale_inv[0];
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float s = len == 1 ? s0 : scale_inv[(i / inner) % len];
        float v = fl_dec_fp8<F::M, F::B>(q[i]);
        if (v == v) v *= s;                      /* a NaN keeps its sign, as on the CPU (see quant_one) */
        if (DST == FL_F32) static_cast<float *>(dst)[i] = v;
        else if (DST == FL_BF16) static_cast<uint16_t *>(dst)[i] = fl_f32_to_bf16_bits(v);
        else {
            uint16_t h = __half_as_ushort(__float2half_rn(v));
            if (v != v) h = (uint16_t)(((__float_as_uint(v) >> 16) & 0x8000u) | 0x7e00u);
            static_cast<uint16_t *>(dst)[i] = h;
        }
    }
}

unsigned grid_for(size_t work) {
    size_t cap = (size_t)fl_cuda_sm_count() * 8, g = (work + kThreads - 1) / kThreads;
    if (g > cap) g = cap;
    return g ? (unsigned)g : 1u;
}

bool is_fp8(fl_dtype t) { return t == FL_E4M3 || t == FL_E5M2; }
bool is_src(fl_dtype t) { return t == FL_F32 || t == FL_BF16 || t == FL_F16; }

/* Dispatch the runtime (source dtype, format, policy, write) to a template instance. Amax-only
 * launches (dst NULL) use one instance per source dtype: the cast's format does not matter there. */
template <template <int, int, bool, bool> class L, typename... A>
fl_status dispatch(fl_dtype s, fl_dtype f, fl_overflow p, bool write, A... a) {
#define FL_Q_SRC(S)                                                                              \
    if (s == S) {                                                                                \
        if (!write) return L<S, FL_E4M3, false, false>::run(a...);                               \
        if (f == FL_E4M3) return p == FL_IEEE ? L<S, FL_E4M3, true, true>::run(a...)             \
                                              : L<S, FL_E4M3, false, true>::run(a...);           \
        return p == FL_IEEE ? L<S, FL_E5M2, true, true>::run(a...) : L<S, FL_E5M2, false, true>::run(a...); \
    }
    FL_Q_SRC(FL_F32) FL_Q_SRC(FL_BF16) FL_Q_SRC(FL_F16)
#undef FL_Q_SRC
    return FL_ERR(FL_EUNSUPPORTED, "quantize on cuda: expected an fp32, bf16 or fp16 source, got %s",
                  fl_format(s)->name);
}

template <int S, int F, bool I, bool W> struct LaunchTensor {
    static fl_status run(const void *src, uint8_t *dst, size_t n, float scale, const float *dscale, bool vec,
                         fl_cuda_qstats *st, cudaStream_t stream) {
        typedef typename SrcT<S>::T T;
        size_t work = vec ? n / (16 / sizeof(T)) + 1 : n;
        quantize_kernel<S, F, I, W><<<grid_for(work), kThreads, 0, stream>>>((const T *)src, dst, n, scale, dscale,
                                                                             vec, st);
        FL_CUDA_CHECK(cudaGetLastError(), "quantize_kernel launch");
        return FL_OK;
    }
};
template <int S, int F, bool I, bool W> struct LaunchRows {
    static fl_status run(const void *src, uint8_t *dst, size_t rows, size_t len, size_t inner, const float *scales,
                         bool vec, fl_cuda_qstats *st, unsigned *row_amax, cudaStream_t stream) {
        typedef typename SrcT<S>::T T;
        size_t cap = (size_t)fl_cuda_sm_count() * 16;
        unsigned g = (unsigned)(rows < cap ? rows : cap);
        quantize_rows_kernel<S, F, I, W><<<g ? g : 1, kThreads, 0, stream>>>((const T *)src, dst, rows, len, inner,
                                                                             scales, vec, st, row_amax);
        FL_CUDA_CHECK(cudaGetLastError(), "quantize_rows_kernel launch");
        return FL_OK;
    }
};

template <int S, int F, bool I, bool W> struct LaunchCols {
    static fl_status run(const void *src, uint8_t *dst, size_t outer, size_t len, size_t inner, const float *scales,
                         bool vec, fl_cuda_qstats *st, unsigned *row_amax, cudaStream_t stream) {
        (void)vec;   /* dispatch's argument for LaunchRows: a column is read one element a thread, never in vectors */
        typedef typename SrcT<S>::T T;
        const ColsGeometry g = cols_geometry(outer, len, inner, fl_cuda_sm_count());
        quantize_cols_kernel<S, F, I, W><<<g.grid, kThreads, 0, stream>>>((const T *)src, dst, outer, g, inner, scales,
                                                                          st, row_amax);
        FL_CUDA_CHECK(cudaGetLastError(), "quantize_cols_kernel launch");
        return FL_OK;
    }
};

bool aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

}  // namespace

fl_status cuda_quantize(const void *src, fl_dtype src_dt, uint8_t *dst, size_t n, fl_dtype fmt, float scale,
                        const float *dscale, fl_overflow p, fl_cuda_qstats *stats, cudaStream_t stream) {
    if (!is_src(src_dt) || !is_fp8(fmt) || !stats || (n && !src))
        return FL_ERR(FL_EINVAL, "cuda_quantize: expected an fp32/bf16/fp16 source, an e4m3/e5m2 target and "
                                 "a stats buffer, got %s -> %s", fl_format(src_dt)->name, fl_format(fmt)->name);
    if (n == 0) return FL_OK;
    size_t vecw = 16 / fl_format(src_dt)->size;
    bool vec = aligned(src, 16) && (!dst || aligned(dst, vecw));
    return dispatch<LaunchTensor>(src_dt, fmt, p, dst != NULL, src, dst, n, scale, dscale, vec, stats, stream);
}

fl_status cuda_quantize_rows(const void *src, fl_dtype src_dt, uint8_t *dst, size_t outer, size_t len, size_t inner,
                             fl_dtype fmt, const float *scales, fl_overflow p, fl_cuda_qstats *stats,
                             unsigned int *row_amax_bits, cudaStream_t stream) {
    if (!is_src(src_dt) || !is_fp8(fmt) || !stats || !row_amax_bits || (dst && !scales))
        return FL_ERR(FL_EINVAL, "cuda_quantize_rows: expected an fp32/bf16/fp16 source, an e4m3/e5m2 target, "
                                 "stats, row amax and (when casting) scales, got %s -> %s",
                      fl_format(src_dt)->name, fl_format(fmt)->name);
    size_t rows = outer * len;
    if (rows == 0 || inner == 0) return FL_OK;
    size_t vecw = 16 / fl_format(src_dt)->size;
    bool vec = inner % vecw == 0 && aligned(src, 16) && (!dst || aligned(dst, vecw));
    /* Runs shorter than a block (per-column scales: inner = 1) across several outer rows: columns per thread. */
    if (inner < (size_t)kThreads && outer > 1)
        return dispatch<LaunchCols>(src_dt, fmt, p, dst != NULL, src, dst, outer, len, inner, scales, vec, stats,
                                    row_amax_bits, stream);
    return dispatch<LaunchRows>(src_dt, fmt, p, dst != NULL, src, dst, rows, len, inner, scales, vec, stats,
                                row_amax_bits, stream);
}

fl_status cuda_scales(size_t n, const unsigned int *amax_bits, const float *given, float value, fl_dtype fmt,
                      int margin, bool pow2, float *scale, float *scale_inv, cudaStream_t stream) {
    if (!is_fp8(fmt) || !scale_inv || margin < 0 || margin > 64)
        return FL_ERR(FL_EINVAL, "cuda_scales: expected an e4m3/e5m2 format, a scale_inv and a margin in 0..64, "
                                 "got %s margin %d", fl_format(fmt)->name, margin);
    if (n == 0) return FL_OK;
    scales_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, amax_bits, given, value, (float)fl_format(fmt)->max, margin,
                                                        pow2, scale, scale_inv);
    FL_CUDA_CHECK(cudaGetLastError(), "scales_kernel launch");
    return FL_OK;
}

fl_status cuda_dequantize(const uint8_t *q, fl_dtype fmt, void *dst, fl_dtype dst_dt, size_t n,
                          const float *scale_inv, size_t len, size_t inner, cudaStream_t stream) {
    if (!is_fp8(fmt) || !is_src(dst_dt) || !scale_inv || len == 0 || (len > 1 && inner == 0))
        return FL_ERR(FL_EINVAL, "cuda_dequantize: expected an e4m3/e5m2 source, an fp32/bf16/fp16 target and "
                                 "a scale_inv, got %s -> %s", fl_format(fmt)->name, fl_format(dst_dt)->name);
    if (n == 0) return FL_OK;
    unsigned g = grid_for(n);
#define FL_DQ(F, D) dequantize_kernel<F, D><<<g, kThreads, 0, stream>>>(q, dst, n, scale_inv, len, inner)
    if (fmt == FL_E4M3) {
        if (dst_dt == FL_F32) FL_DQ(FL_E4M3, FL_F32); else if (dst_dt == FL_BF16) FL_DQ(FL_E4M3, FL_BF16);
        else FL_DQ(FL_E4M3, FL_F16);
    } else {
        if (dst_dt == FL_F32) FL_DQ(FL_E5M2, FL_F32); else if (dst_dt == FL_BF16) FL_DQ(FL_E5M2, FL_BF16);
        else FL_DQ(FL_E5M2, FL_F16);
    }
#undef FL_DQ
    FL_CUDA_CHECK(cudaGetLastError(), "dequantize_kernel launch");
    return FL_OK;
}

/* The columns kernel's geometry and items run on the host, block after block and thread after thread, for an
 * fp32 source (tests without a GPU: fl_cuda_host.h); `sms` stands for the GPU's SM count. Per-column amax into
 * col_amax[len] (zeroed here), the statistics of the whole cast into *stats. */
template <int FMT, bool IEEE>
static void cols_host(const float *src, uint8_t *dst, size_t outer, size_t len, size_t inner, const float *scales,
                      int sms, fl_cast_stats *stats, float *col_amax) {
    const ColsGeometry g = cols_geometry(outer, len, inner, sms);
    Acc total{0.0f, 0, 0, 0};
    for (size_t r = 0; r < len; r++) col_amax[r] = 0.0f;
    for (unsigned b = 0; b < g.grid; b++)
        for (size_t it = b; it < g.items; it += g.grid)
            for (size_t t = 0; t < (size_t)kThreads; t++) {
                Acc acc{0.0f, 0, 0, 0};
                size_t r;
                bool in = dst ? cols_item<FL_F32, FMT, IEEE, true>(src, dst, outer, g, inner, scales, it, t, acc, &r)
                              : cols_item<FL_F32, FMT, IEEE, false>(src, dst, outer, g, inner, scales, it, t, acc, &r);
                if (!in) continue;
                acc_add(total, acc);
                if (acc.amax > col_amax[r]) col_amax[r] = acc.amax;
            }
    stats->amax = total.amax;
    stats->underflow = total.underflow;
    stats->saturated = total.saturated;
    stats->nan = total.nan;
}

extern "C" fl_status fl_cuda_quantize_cols_host(const float *src, uint8_t *dst, size_t outer, size_t len,
                                                size_t inner, fl_dtype fmt, const float *scales, fl_overflow p,
                                                int sms, fl_cast_stats *stats, float *col_amax) {
    if (!is_fp8(fmt) || !stats || !col_amax || (dst && !scales) || outer * len * inner == 0)
        return FL_ERR(FL_EINVAL, "fl_cuda_quantize_cols_host: expected an e4m3/e5m2 format, stats, column amax, scales "
                                 "when casting, and a non-empty tensor");
    const bool ieee = p == FL_IEEE;
    if (fmt == FL_E4M3) ieee ? cols_host<FL_E4M3, true>(src, dst, outer, len, inner, scales, sms, stats, col_amax)
                             : cols_host<FL_E4M3, false>(src, dst, outer, len, inner, scales, sms, stats, col_amax);
    else ieee ? cols_host<FL_E5M2, true>(src, dst, outer, len, inner, scales, sms, stats, col_amax)
              : cols_host<FL_E5M2, false>(src, dst, outer, len, inner, scales, sms, stats, col_amax);
    return FL_OK;
}

/* Host entry points to the device conversions, for tests that run without a GPU. */
extern "C" unsigned char fl_cuda_cvt_fp8_host(float x, int fmt, int policy) {
    bool over;
    return fmt == FL_E4M3 ? fl_cvt_fp8<3, 7>(x, policy == FL_IEEE, &over) : fl_cvt_fp8<2, 15>(x, policy == FL_IEEE, &over);
}
extern "C" float fl_cuda_decode_fp8_host(unsigned char b, int fmt) {
    return fmt == FL_E4M3 ? fl_dec_fp8<3, 7>(b) : fl_dec_fp8<2, 15>(b);
}
