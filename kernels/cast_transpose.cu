/* cast_transpose.cu — fused scale + cast + transpose + amax: src [rows, cols] (fp32/bf16/fp16,
 * row-major) → out [rows, cols] and out_t [cols, rows] FP8 (E4M3/E5M2, saturating, RNE), the two
 * copies an FP8 linear needs (fprop reads x and W as they are; dgrad and wgrad read the transposed
 * copies, since Hopper's FP8 GEMMs take only the "TN" layout). Maths: q = fp8(x·s) (fp8_cvt.h);
 * amax = max |x| over the unscaled source, NaN ignored; counters as core/format.c. Per tensor, s is a
 * device float (a delayed recipe's scale); per row, s_r is the current-scaling rule of the row's amax.
 * Layout: each block walks 64×64 tiles (grid-stride); a tile is read once with 16-byte loads, cast in
 * registers, written row-major with 4/8-byte stores and into a shared-memory tile, then written
 * transposed with 16-byte stores. amax and counters: warp shuffles, one atomic per block and counter.
 * Tolerance: bit-exact with core/format.c's fl_quantize_f32 (bytes, amax, counters, scale_inv);
 * tests/c/test_gpu_fp8.c. */
#include "cuda_common.cuh"

namespace {

constexpr int kThreads = 256, kTile = 64, kPitch = kTile + 4;   /* pitch: rows stay 4-byte aligned */

/* Rows' scales for a tile: per tensor, *scale for every row; per row, the rule of row_amax[r]. */
template <bool ROWWISE>
__device__ __forceinline__ float row_scale(const float *scale, const float *row_amax, int64_t r, float fmt_max,
                                           int margin, bool pow2) {
    if (!ROWWISE) return *scale;
    float a = row_amax[r];
    return fl_amax_to_scale_current(a, fmt_max, margin, pow2);
}

template <int SRC, int FMT, bool ROWWISE>
__global__ void __launch_bounds__(kThreads)
cast_transpose_kernel(const typename SrcT<SRC>::T *__restrict__ src, int64_t rows, int64_t cols,
                      const float *scale, const float *row_amax, float fmt_max, int margin, bool pow2,
                      float *scale_inv, uint8_t *__restrict__ out, uint8_t *__restrict__ out_t, bool vec_in,
                      bool vec_t, fl_cuda_qstats *stats, unsigned int *record) {
    typedef typename SrcT<SRC>::T T;
    constexpr int VEC = 16 / (int)sizeof(T);                 /* elements per 16-byte load */
    constexpr int CPR = kTile / VEC;                         /* 16-byte chunks per tile row */
    constexpr int PER = kTile * CPR / kThreads;              /* chunks per thread per tile */
    __shared__ __align__(16) uint8_t tile[kTile][kPitch];
    __shared__ float srow[kTile];
    const int tid = threadIdx.x;
    const int64_t tiles_c = (cols + kTile - 1) / kTile, ntiles = tiles_c * ((rows + kTile - 1) / kTile);
    Acc acc{0.0f, 0, 0, 0};
    const float s0 = ROWWISE ? 1.0f : *scale;
    if (!ROWWISE && scale_inv && blockIdx.x == 0 && tid == 0) *scale_inv = fl_fdiv(1.0f, s0);

    for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const int64_t r0 = (t / tiles_c) * kTile, c0 = (t % tiles_c) * kTile;
        const int nr = rows - r0 < kTile ? (int)(rows - r0) : kTile, nc = cols - c0 < kTile ? (int)(cols - c0) : kTile;
        const bool full = nr == kTile && nc == kTile;
        if (ROWWISE) {
            if (tid < nr) srow[tid] = row_scale<true>(scale, row_amax, r0 + tid, fmt_max, margin, pow2);
            __syncthreads();
        }
        if (full && vec_in) {
            uint4 raw[PER];
#pragma unroll
            for (int j = 0; j < PER; j++) {                  /* all loads in flight before the first use */
                int idx = j * kThreads + tid, r = idx / CPR, cc = idx % CPR;
                raw[j] = __ldg(reinterpret_cast<const uint4 *>(src + (r0 + r) * cols + c0) + cc);
            }
#pragma unroll
            for (int j = 0; j < PER; j++) {
                int idx = j * kThreads + tid, r = idx / CPR, cc = idx % CPR;
                float s = ROWWISE ? srow[r] : s0;
                const T *e = reinterpret_cast<const T *>(&raw[j]);
                uint32_t w[VEC / 4];
#pragma unroll
                for (int k = 0; k < VEC / 4; k++) w[k] = 0;
#pragma unroll
                for (int k = 0; k < VEC; k++)
                    w[k >> 2] |= (uint32_t)quant_one<FMT, false>(SrcT<SRC>::f(e[k]), s, acc) << (8 * (k & 3));
                uint32_t *sm = reinterpret_cast<uint32_t *>(&tile[r][cc * VEC]);
#pragma unroll
                for (int k = 0; k < VEC / 4; k++) sm[k] = w[k];
                if (out) {
                    uint8_t *o = out + (r0 + r) * cols + c0 + cc * VEC;
                    if (VEC == 4) *reinterpret_cast<uint32_t *>(o) = w[0];
                    else *reinterpret_cast<uint2 *>(o) = make_uint2(w[0], w[VEC / 4 - 1]);
                }
            }
        } else {
            for (int idx = tid; idx < kTile * kTile; idx += kThreads) {
                int r = idx / kTile, c = idx % kTile;
                if (r < nr && c < nc) {
                    int64_t at = (r0 + r) * cols + c0 + c;
                    uint8_t q = quant_one<FMT, false>(SrcT<SRC>::f(src[at]), ROWWISE ? srow[r] : s0, acc);
                    tile[r][c] = q;
                    if (out) out[at] = q;
                }
            }
        }
        __syncthreads();
        if (out_t) {
            if (full && vec_t) {
                /* 64 columns × 4 runs of 16 rows: one 16-byte store per thread */
                int c = tid >> 2, rq = (tid & 3) * 16;
                uint32_t w[4] = { 0, 0, 0, 0 };
#pragma unroll
                for (int j = 0; j < 16; j++) w[j >> 2] |= (uint32_t)tile[rq + j][c] << (8 * (j & 3));
                *reinterpret_cast<uint4 *>(out_t + (c0 + c) * rows + r0 + rq) = make_uint4(w[0], w[1], w[2], w[3]);
            } else {
                for (int idx = tid; idx < kTile * kTile; idx += kThreads) {
                    int c = idx / kTile, r = idx % kTile;
                    if (r < nr && c < nc) out_t[(c0 + c) * rows + r0 + r] = tile[r][c];
                }
            }
        }
        __syncthreads();                                     /* tile and srow are rewritten next */
    }
    acc = block_reduce(acc);
    if (tid == 0) {
        flush(acc, stats);
        if (record) {
            unsigned v = acc.nan ? 0x7fc00000u : __float_as_uint(acc.amax);
            if (v) atomicMax(record, v);
        }
    }
}

/* One warp per row: row_amax[r] = max |x| (NaN ignored), scale_inv[r] = 1/s_r. */
template <int SRC>
__global__ void __launch_bounds__(kThreads)
row_amax_kernel(const typename SrcT<SRC>::T *__restrict__ src, int64_t rows, int64_t cols, bool vec, float fmt_max,
                int margin, bool pow2, float *row_amax, float *scale_inv) {
    typedef typename SrcT<SRC>::T T;
    constexpr int VEC = 16 / (int)sizeof(T);
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (kThreads / 32);
    for (int64_t r = (int64_t)blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5); r < rows; r += warps) {
        const T *row = src + r * cols;
        float m = 0.0f;
        int64_t tail = 0;
        if (vec) {
            for (int64_t v = lane; v < cols / VEC; v += 32) {
                uint4 raw = __ldg(reinterpret_cast<const uint4 *>(row) + v);
                const T *e = reinterpret_cast<const T *>(&raw);
#pragma unroll
                for (int k = 0; k < VEC; k++) m = fmaxf(m, fabsf(SrcT<SRC>::f(e[k])));
            }
            tail = cols / VEC * VEC;
        }
        for (int64_t c = tail + lane; c < cols; c += 32) m = fmaxf(m, fabsf(SrcT<SRC>::f(row[c])));
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (lane == 0) {
            row_amax[r] = m;
            float s = fl_amax_to_scale_current(m, fmt_max, margin, pow2);
            scale_inv[r] = fl_fdiv(1.0f, s);
        }
    }
}

bool aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

template <int SRC, int FMT, bool ROWWISE>
fl_status launch_ct(const void *src, int64_t rows, int64_t cols, const float *scale, const float *row_amax,
                    float fmt_max, int margin, bool pow2, float *scale_inv, uint8_t *out, uint8_t *out_t,
                    fl_cuda_qstats *stats, unsigned *record, cudaStream_t st) {
    typedef typename SrcT<SRC>::T T;
    const int vec_w = 16 / (int)sizeof(T);
    bool vec_in = cols % vec_w == 0 && aligned(src, 16) && (!out || aligned(out, (size_t)vec_w));
    bool vec_t = rows % 16 == 0 && aligned(out_t, 16);
    int64_t tiles = ((rows + kTile - 1) / kTile) * ((cols + kTile - 1) / kTile);
    int64_t cap = (int64_t)fl_cuda_sm_count() * 8;
    unsigned grid = (unsigned)(tiles < cap ? tiles : cap);
    if (grid == 0) grid = 1;                       /* an empty source still writes scale_inv */
    cast_transpose_kernel<SRC, FMT, ROWWISE><<<grid, kThreads, 0, st>>>(
        (const T *)src, rows, cols, scale, row_amax, fmt_max, margin, pow2, scale_inv, out, out_t, vec_in, vec_t,
        stats, record);
    FL_CUDA_CHECK(cudaGetLastError(), "cast_transpose_kernel launch");
    return FL_OK;
}

template <bool ROWWISE>
fl_status dispatch_ct(fl_dtype sdt, fl_dtype fmt, const void *src, int64_t rows, int64_t cols, const float *scale,
                      const float *row_amax, int margin, bool pow2, float *scale_inv, uint8_t *out, uint8_t *out_t,
                      fl_cuda_qstats *stats, unsigned *record, cudaStream_t st) {
    float fmax = (float)fl_format(fmt)->max;
#define FL_CT(S, F) launch_ct<S, F, ROWWISE>(src, rows, cols, scale, row_amax, fmax, margin, pow2, scale_inv, out, \
                                             out_t, stats, record, st)
    if (sdt == FL_F32) return fmt == FL_E4M3 ? FL_CT(FL_F32, FL_E4M3) : FL_CT(FL_F32, FL_E5M2);
    if (sdt == FL_BF16) return fmt == FL_E4M3 ? FL_CT(FL_BF16, FL_E4M3) : FL_CT(FL_BF16, FL_E5M2);
    return fmt == FL_E4M3 ? FL_CT(FL_F16, FL_E4M3) : FL_CT(FL_F16, FL_E5M2);
#undef FL_CT
}

fl_status check_common(const char *fn, const void *src, fl_dtype sdt, int64_t rows, int64_t cols, fl_dtype fmt,
                       const uint8_t *out, const uint8_t *out_t) {
    if (sdt != FL_F32 && sdt != FL_BF16 && sdt != FL_F16)
        return FL_ERR(FL_EUNSUPPORTED, "%s: expected an fp32, bf16 or fp16 source, got %s", fn,
                      fl_format(sdt) ? fl_format(sdt)->name : "an unknown dtype");
    if (!is_fp8_dtype(fmt))
        return FL_ERR(FL_EINVAL, "%s: expected an e4m3 or e5m2 target, got %s", fn,
                      fl_format(fmt) ? fl_format(fmt)->name : "an unknown dtype");
    if (rows < 0 || cols < 0) return FL_ERR(FL_EINVAL, "%s: negative shape [%lld, %lld]", fn, (long long)rows,
                                            (long long)cols);
    if (!out && !out_t) return FL_ERR(FL_EINVAL, "%s: neither out nor out_t given", fn);
    if (rows * cols > 0 && !src) return FL_ERR(FL_EINVAL, "%s: source is NULL", fn);
    return FL_OK;
}

}  // namespace

extern "C" fl_status fl_cuda_cast_transpose(const void *src, fl_dtype src_dt, int64_t rows, int64_t cols,
                                            fl_dtype fmt, const float *scale, float *scale_inv, uint8_t *out,
                                            uint8_t *out_t, fl_cuda_qstats *stats, float *record_amax,
                                            fl_cuda_stream_t stream) {
    FL_TRY(check_common("cuda cast_transpose", src, src_dt, rows, cols, fmt, out, out_t));
    if (!scale) return FL_ERR(FL_EINVAL, "cuda cast_transpose: scale (a device float) is NULL");
    return dispatch_ct<false>(src_dt, fmt, src, rows, cols, scale, NULL, 0, false, scale_inv, out, out_t, stats,
                              (unsigned *)record_amax, pick_stream(stream));
}

extern "C" fl_status fl_cuda_cast_transpose_rowwise(const void *src, fl_dtype src_dt, int64_t rows, int64_t cols,
                                                    fl_dtype fmt, int margin, bool pow2, float *row_amax,
                                                    float *scale_inv, uint8_t *out, uint8_t *out_t,
                                                    fl_cuda_qstats *stats, fl_cuda_stream_t stream) {
    FL_TRY(check_common("cuda cast_transpose_rowwise", src, src_dt, rows, cols, fmt, out, out_t));
    if (!row_amax || !scale_inv)
        return FL_ERR(FL_EINVAL, "cuda cast_transpose_rowwise: row_amax and scale_inv (rows device floats) are required");
    if (margin < 0 || margin > 64)
        return FL_ERR(FL_EINVAL, "cuda cast_transpose_rowwise: margin must be in 0..64, got %d", margin);
    if (rows == 0) return FL_OK;
    cudaStream_t st = pick_stream(stream);
    float fmax = (float)fl_format(fmt)->max;
    int64_t warps = kThreads / 32, cap = (int64_t)fl_cuda_sm_count() * 8;
    int64_t blocks = (rows + warps - 1) / warps;
    unsigned grid = (unsigned)(blocks < cap ? blocks : cap);
    size_t es = fl_format(src_dt)->size;
    bool vec = cols % (int64_t)(16 / es) == 0 && aligned(src, 16);
    if (src_dt == FL_F32)
        row_amax_kernel<FL_F32><<<grid, kThreads, 0, st>>>((const float *)src, rows, cols, vec, fmax, margin, pow2,
                                                            row_amax, scale_inv);
    else if (src_dt == FL_BF16)
        row_amax_kernel<FL_BF16><<<grid, kThreads, 0, st>>>((const uint16_t *)src, rows, cols, vec, fmax, margin,
                                                             pow2, row_amax, scale_inv);
    else
        row_amax_kernel<FL_F16><<<grid, kThreads, 0, st>>>((const uint16_t *)src, rows, cols, vec, fmax, margin,
                                                            pow2, row_amax, scale_inv);
    FL_CUDA_CHECK(cudaGetLastError(), "row_amax_kernel launch");
    if (cols == 0) return FL_OK;
    return dispatch_ct<true>(src_dt, fmt, src, rows, cols, NULL, row_amax, margin, pow2, NULL, out, out_t, stats,
                             NULL, st);
}
