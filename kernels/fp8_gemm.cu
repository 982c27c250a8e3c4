/* fp8_gemm.cu — the fp8_gemm entry of the cuda device (core/device.h; the FP8 linear's three GEMMs):
 *   dst[m, n] = (Σ_k dec(a)[m, k]·dec(b)[k, n]) · sa[m] · sb[n] (+ bias[n]),  fp32, accumulated in fp32.
 * Layouts: a [M, K] is stored [M, K] (K-major) or is the transposed view of a stored [K, M]; b [K, N] is
 * stored [N, K] (K-major) or [K, N]. cuBLASLt's FP8 kernels take only K-major A and B ("TN"), so an
 * operand stored the other way is copied K-major by a byte transpose (64×64 tiles through shared memory,
 * coalesced loads and stores). Scales: per tensor on both sides → cuBLASLt's alpha (a_scale_inv ·
 * b_scale_inv) and its bias epilogue (or gemm_lt's bias pass); a per-row sa or per-column sb → the GEMM
 * runs with unit scales and one epilogue pass applies acc·(sa[m]·sb[n]) + bias[n] — the CPU's expression
 * (core/cpu/cpu_fp8_gemm.c, the scale pass of fl_cpu_dev_fp8_gemm), separately rounded. Where the FP8 GEMM cannot run (k or n not multiples
 * of 16, an unaligned operand, e5m2 × e5m2, a GPU below sm_89, or cuBLASLt refusing it) both operands are
 * decoded exactly to bf16 (K-major) and multiplied by a bf16 GEMM with fp32 accumulation — the same exact
 * products — followed by the same epilogue. b_cache keeps what was derived from the bytes of a b stored
 * [K, N]: its K-major FP8 copy (dtype b's) or its K-major bf16 decode (dtype bf16), both [N, K]; a b that is
 * already K-major neither reads nor writes it (the FP8 linear hands the same slot to its forward, where b is
 * Wᵀ, and to dgrad, where b is W, whose [N, K] form the slot holds). a_cache is read, never
 * written: an a stored [K, M] uses the [M, K] FP8 bytes found there (quantize_transpose's copy, which the
 * FP8 linear hands in for wgrad's dYᵀ) instead of transposing; b_cache may come prefilled the same way.
 * Deterministic: every output element is written by one thread; the GEMMs are cuBLASLt's.
 * Tolerance (tests/c/test_gpu_train_ops.c): |gpu − ref| ≤ max(1e-5, (K+2)·2^-24)·|sa·sb|·Σ|a·b| + 2^-21·|ref|
 * against float64 sums of the decoded bytes; the transposes, decodes and epilogue are exact / the CPU's
 * rounding and are also checked on the host. */
#include "cuda_common.cuh"
#include "fl_cuda_host.h"
#include "cuda_entries.h"
#include "gemm_lt.h"

namespace {

constexpr int kThreads = 256;
constexpr int kTile = 64;                       /* a tile is 64×64 source bytes */
constexpr int kTileTy = kThreads / kTile;       /* 4 rows of threads step through the tile */
constexpr int kPitch = kTile + 4;               /* 68-byte smem rows: column reads hit 32 distinct banks */

/* What a transpose writes: the bytes, or their exact bf16 decode. */
enum { OUT_BYTES = 0, OUT_E4M3_BF16 = 1, OUT_E5M2_BF16 = 2 };
template <int OUT> struct OutT { typedef uint16_t T; };
template <> struct OutT<OUT_BYTES> { typedef uint8_t T; };

/* FP8 byte → bf16 bits: the fp32 decode is exact and its low 16 bits are zero (3 or 2 mantissa bits,
 * exponents inside bf16's normal range); NaN codes give the quiet NaN 0x7fc0 with the code's sign, as
 * core/fp8_linear.c's decoders do. */
FL_HD uint16_t fp8_bf16_bits(uint8_t b, bool e5m2) {
    const float f = e5m2 ? fl_dec_fp8<2, 15>(b) : fl_dec_fp8<3, 7>(b);
    return (uint16_t)(fl_f2u(f) >> 16);
}

template <int OUT>
FL_HD typename OutT<OUT>::T convert(uint8_t b) {
    if constexpr (OUT == OUT_BYTES) return b;
    else return fp8_bf16_bits(b, OUT == OUT_E5M2_BF16);
}

/* ---- tiled transpose: src [R, C] row-major → dst [C, R] row-major --------------------------------- */

struct Tiles {
    int64_t R, C;      /* source rows and columns */
    int64_t ntc;       /* tiles per tile-row */
    int64_t count;     /* tiles in all */
};

FL_HD Tiles tiles_of(int64_t R, int64_t C) {
    Tiles t;
    t.R = R; t.C = C;
    t.ntc = (C + kTile - 1) / kTile;
    t.count = ((R + kTile - 1) / kTile) * t.ntc;
    return t;
}

/* First source row and column of tile i (tiles in row-major order). */
FL_HD void tile_origin(const Tiles &t, int64_t i, int64_t &r0, int64_t &c0) {
    r0 = (i / t.ntc) * kTile;
    c0 = (i % t.ntc) * kTile;
}

/* Load phase of thread (tx, ty), tx < 64, ty < 4: source rows r0 + ty, r0 + ty + 4, ... at column c0 + tx
 * into tile[row][tx] (a warp reads 32 consecutive bytes of one row). */
FL_HD void tile_load(const uint8_t *src, uint8_t *tile, const Tiles &t, int64_t r0, int64_t c0, int tx, int ty) {
    const int64_t c = c0 + tx;
    for (int rr = ty; rr < kTile; rr += kTileTy) {
        const int64_t r = r0 + rr;
        if (r < t.R && c < t.C) tile[rr * kPitch + tx] = src[r * t.C + c];
    }
}

/* Store phase: destination rows c0 + ty, c0 + ty + 4, ... (source columns) at column r0 + tx (source
 * row), from tile[tx][cc] (a warp writes 32 consecutive elements of one row). It reads exactly the
 * entries the load phase wrote. */
template <int OUT>
FL_HD void tile_store(typename OutT<OUT>::T *dst, const uint8_t *tile, const Tiles &t, int64_t r0, int64_t c0,
                      int tx, int ty) {
    const int64_t r = r0 + tx;
    for (int cc = ty; cc < kTile; cc += kTileTy) {
        const int64_t c = c0 + cc;
        if (c < t.C && r < t.R) dst[c * t.R + r] = convert<OUT>(tile[tx * kPitch + cc]);
    }
}

/* Blocks step through the tiles (block-uniform loop, so the barriers are safe). */
template <int OUT>
__global__ void __launch_bounds__(kThreads) fp8_transpose_kernel(const uint8_t *src, typename OutT<OUT>::T *dst,
                                                                 Tiles t) {
    __shared__ uint8_t tile[kTile * kPitch];
    const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
    for (int64_t i = blockIdx.x; i < t.count; i += gridDim.x) {
        int64_t r0, c0;
        tile_origin(t, i, r0, c0);
        tile_load(src, tile, t, r0, c0, tx, ty);
        __syncthreads();
        tile_store<OUT>(dst, tile, t, r0, c0, tx, ty);
        __syncthreads();   /* the next tile's loads overwrite the tile */
    }
}

template <bool E5M2>
__global__ void __launch_bounds__(kThreads) fp8_decode_kernel(const uint8_t *src, uint16_t *dst, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = fp8_bf16_bits(src[i], E5M2);
}

/* ---- epilogue: d[m, n] = d[m, n]·(sa[m]·sb[n]) + bias[n] ------------------------------------------ */

struct Epi {
    const float *sa, *sb;      /* device (host in the host run) */
    bool a_vec, b_vec;         /* sa has M entries / sb has N entries; else one each */
    const void *bias;          /* N entries of bias_dt, or NULL */
    int bias_dt;
};

FL_HD float bias_at(const void *bias, int dt, int64_t n) {
    if (dt == FL_F32) return static_cast<const float *>(bias)[n];
    const uint16_t h = static_cast<const uint16_t *>(bias)[n];
    return dt == FL_BF16 ? fl_bf16_bits_to_f32(h) : fl_f16_bits_to_f32(h);
}

/* Element idx of a [., N] row-major d, as core/cpu/cpu_fp8_gemm.c's scale pass rounds it: acc·(ra·sb) (+ bias). */
FL_HD void epi_at(float *d, int64_t idx, int64_t N, const Epi &e) {
    const int64_t m = idx / N, n = idx % N;
    const float r = fl_fmul(d[idx], fl_fmul(e.sa[e.a_vec ? m : 0], e.sb[e.b_vec ? n : 0]));
    d[idx] = e.bias ? fl_fadd(r, bias_at(e.bias, e.bias_dt, n)) : r;
}

__global__ void __launch_bounds__(kThreads) fp8_epilogue_kernel(float *d, int64_t total, int64_t N, Epi e) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        epi_at(d, i, N, e);
}

/* ---- launches --------------------------------------------------------------------------------------- */

fl_status launch_transpose(int out, const uint8_t *src, void *dst, int64_t R, int64_t C) {
    const Tiles t = tiles_of(R, C);
    if (t.count == 0) return FL_OK;
    const unsigned grid = grid_for_work((size_t)t.count, 1, 16);
    cudaStream_t st = fl_cuda_stream();
    if (out == OUT_BYTES)
        fp8_transpose_kernel<OUT_BYTES><<<grid, kThreads, 0, st>>>(src, static_cast<uint8_t *>(dst), t);
    else if (out == OUT_E4M3_BF16)
        fp8_transpose_kernel<OUT_E4M3_BF16><<<grid, kThreads, 0, st>>>(src, static_cast<uint16_t *>(dst), t);
    else
        fp8_transpose_kernel<OUT_E5M2_BF16><<<grid, kThreads, 0, st>>>(src, static_cast<uint16_t *>(dst), t);
    FL_CUDA_CHECK(cudaGetLastError(), "fp8_transpose_kernel launch");
    return FL_OK;
}

fl_status launch_decode(const uint8_t *src, uint16_t *dst, size_t n, fl_dtype fmt) {
    if (n == 0) return FL_OK;
    const unsigned grid = grid_for_work(n, kThreads, 8);
    if (fmt == FL_E5M2) fp8_decode_kernel<true><<<grid, kThreads, 0, fl_cuda_stream()>>>(src, dst, n);
    else fp8_decode_kernel<false><<<grid, kThreads, 0, fl_cuda_stream()>>>(src, dst, n);
    FL_CUDA_CHECK(cudaGetLastError(), "fp8_decode_kernel launch");
    return FL_OK;
}

/* An operand stored [rows, K] (K-major) as K-major bf16: a plain decode; one stored [K, rows]: a
 * transposing decode. */
fl_status decode_kmajor(const uint8_t *src, bool kmajor, fl_dtype fmt, int64_t rows, int64_t K, uint16_t *dst) {
    if (kmajor) return launch_decode(src, dst, (size_t)(rows * K), fmt);
    return launch_transpose(fmt == FL_E5M2 ? OUT_E5M2_BF16 : OUT_E4M3_BF16, src, dst, K, rows);
}

fl_status launch_epilogue(float *d, int64_t M, int64_t N, const Epi &e) {
    const int64_t total = M * N;
    if (total == 0) return FL_OK;
    fp8_epilogue_kernel<<<grid_for_work((size_t)total, kThreads, 8), kThreads, 0, fl_cuda_stream()>>>(d, total, N, e);
    FL_CUDA_CHECK(cudaGetLastError(), "fp8_epilogue_kernel launch");
    return FL_OK;
}

/* The unit scale the FP8 GEMM takes when the real scales are applied in the epilogue. */
__device__ float g_unit_scale = 1.0f;

fl_status unit_scale(const float **out) {
    void *p = NULL;
    FL_CUDA_CHECK(cudaGetSymbolAddress(&p, g_unit_scale), "cudaGetSymbolAddress");
    *out = static_cast<const float *>(p);
    return FL_OK;
}

/* Compute capability of the current device as major·10 + minor (0 if it cannot be read). */
int device_cc(void) {
    static const int cc = [] {
        int dev = 0, major = 0, minor = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
            (void)cudaGetLastError();
            return 0;
        }
        return major * 10 + minor;
    }();
    return cc;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }


const char *dtn(fl_dtype t) { return fl_format(t) ? fl_format(t)->name : "an unknown dtype"; }

fl_status check_operand(const fl_tensor *t, const char *what) {
    if (!t) return FL_ERR(FL_EINVAL, "cuda fp8_gemm: %s is missing", what);
    if (t->dtype != FL_E4M3 && t->dtype != FL_E5M2)
        return FL_ERR(FL_EINVAL, "cuda fp8_gemm: %s must be e4m3 or e5m2, got %s", what, dtn(t->dtype));
    if (t->ndim != 2) return FL_ERR(FL_EINVAL, "cuda fp8_gemm: %s must be 2-d, got %d dims", what, t->ndim);
    if (t->device != FL_DEV_CUDA) return FL_ERR(FL_EINVAL, "cuda fp8_gemm: %s is not on the cuda device", what);
    return FL_OK;
}

/* The scale_inv of an operand: `len` fp32 values on the GPU when vec, else one. */
fl_status check_scale(const fl_tensor *t, const char *what, bool vec, int64_t len, const float **si) {
    const fl_tensor *s = t->scale_inv;
    const int64_t want = vec ? len : 1;
    if (!s || s->dtype != FL_F32 || s->device != FL_DEV_CUDA || !fl_tensor_is_contiguous(s) ||
        fl_tensor_numel(s) != want)
        return FL_ERR(FL_EINVAL, "cuda fp8_gemm: %s's scale_inv must be %lld fp32 value(s) on cuda", what,
                      (long long)want);
    *si = static_cast<const float *>(fl_tensor_data(s));
    return FL_OK;
}

/* A new [N, K] tensor of dtype dt on the GPU holding b's K-major form, written by fill(); it replaces
 * *slot only once written, so a failure leaves the slot as it was. */
template <class Fill>
fl_status make_cache(fl_tensor **slot, fl_dtype dt, int64_t N, int64_t K, Fill fill, const void **data) {
    const int64_t shape[2] = { N, K };
    fl_tensor *t = NULL;
    FL_TRY(fl_tensor_empty(&t, dt, 2, shape, FL_DEV_CUDA));
    fl_status st = fill(fl_tensor_data(t));
    if (st != FL_OK) { fl_tensor_release(t); return st; }
    fl_tensor_release(*slot);
    *slot = t;
    *data = fl_tensor_data(t);
    return FL_OK;
}

}  // namespace

extern "C" fl_status fl_cuda_dev_fp8_gemm(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, const fl_tensor *bias,
                                          fl_tensor **a_cache, fl_tensor **b_cache, bool fast_accum) {
    FL_TRY(check_operand(a, "a"));
    FL_TRY(check_operand(b, "b"));
    const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    if (b->shape[0] != K)
        return FL_ERR(FL_EINVAL, "cuda fp8_gemm: a is [%lld, %lld] but b is [%lld, %lld]", (long long)M, (long long)K,
                      (long long)b->shape[0], (long long)N);
    if (!dst || dst->dtype != FL_F32 || dst->device != FL_DEV_CUDA || dst->ndim != 2 || dst->shape[0] != M ||
        dst->shape[1] != N || !fl_tensor_is_contiguous(dst))
        return FL_ERR(FL_EINVAL, "cuda fp8_gemm: dst must be a contiguous fp32 [%lld, %lld] cuda tensor", (long long)M,
                      (long long)N);
    /* a stored [M, K]: element (m, k) at m·K + k; or stored [K, M]: at k·M + m. Size-1 dims take any stride. */
    const bool a_k = (M <= 1 || a->stride[0] == K) && (K <= 1 || a->stride[1] == 1);
    const bool a_m = (M <= 1 || a->stride[0] == 1) && (K <= 1 || a->stride[1] == M);
    /* b stored [N, K]: (k, n) at n·K + k; or stored [K, N]: at k·N + n. */
    const bool b_k = (K <= 1 || b->stride[0] == 1) && (N <= 1 || b->stride[1] == K);
    const bool b_n = (K <= 1 || b->stride[0] == N) && (N <= 1 || b->stride[1] == 1);
    const bool empty = M == 0 || N == 0 || K == 0;   /* no bytes are read: any layout will do */
    if (!empty && !a_k && !a_m)
        return FL_ERR(FL_EINVAL, "cuda fp8_gemm: a (strides %lld, %lld) must be contiguous or the transpose of a "
                      "contiguous tensor", (long long)a->stride[0], (long long)a->stride[1]);
    if (!empty && !b_k && !b_n)
        return FL_ERR(FL_EINVAL, "cuda fp8_gemm: b (strides %lld, %lld) must be contiguous or the transpose of a "
                      "contiguous tensor", (long long)b->stride[0], (long long)b->stride[1]);
    if (a->scale_axis != -1 && a->scale_axis != 0)
        return FL_ERR(FL_EINVAL, "cuda fp8_gemm: a's scale must be per tensor or per row, got axis %d", a->scale_axis);
    if (b->scale_axis != -1 && b->scale_axis != 1)
        return FL_ERR(FL_EINVAL, "cuda fp8_gemm: b's scale must be per tensor or per column, got axis %d",
                      b->scale_axis);
    Epi e;
    e.a_vec = a->scale_axis == 0;
    e.b_vec = b->scale_axis == 1;
    FL_TRY(check_scale(a, "a", e.a_vec, M, &e.sa));
    FL_TRY(check_scale(b, "b", e.b_vec, N, &e.sb));
    e.bias = NULL;
    e.bias_dt = FL_F32;
    if (bias) {
        if ((bias->dtype != FL_F32 && bias->dtype != FL_BF16 && bias->dtype != FL_F16) || bias->device != FL_DEV_CUDA ||
            !fl_tensor_is_contiguous(bias) || fl_tensor_numel(bias) != N)
            return FL_ERR(FL_EINVAL, "cuda fp8_gemm: bias must be %lld contiguous fp32/bf16/fp16 values on cuda, got %s",
                          (long long)N, dtn(bias->dtype));
        e.bias = fl_tensor_data(bias);
        e.bias_dt = bias->dtype;
    }
    if (M == 0 || N == 0) return FL_OK;
    float *d = static_cast<float *>(fl_tensor_data(dst));
    if (K == 0) {   /* empty sums: dst = 0·scales (+ bias), as the CPU's zero GEMM and epilogue give */
        FL_CUDA_CHECK(cudaMemsetAsync(d, 0, (size_t)(M * N) * sizeof(float), fl_cuda_stream()), "cudaMemsetAsync");
        return launch_epilogue(d, M, N, e);
    }
    const uint8_t *ad = static_cast<const uint8_t *>(fl_tensor_data(a));
    const uint8_t *bd = static_cast<const uint8_t *>(fl_tensor_data(b));
    auto cached = [&](fl_dtype dt) -> const void * {   /* the slot's data when it holds b's [N, K] form dt */
        const fl_tensor *c = b_cache ? *b_cache : NULL;
        if (!c || c->dtype != dt || c->device != FL_DEV_CUDA || c->ndim != 2 || c->shape[0] != N || c->shape[1] != K ||
            !fl_tensor_is_contiguous(c))
            return NULL;
        return fl_tensor_data(c);
    };
    auto cached_a = [&]() -> const void * {   /* a's [M, K] K-major bytes, when the caller's cast made them */
        const fl_tensor *c = a_cache ? *a_cache : NULL;
        if (!c || c->dtype != a->dtype || c->device != FL_DEV_CUDA || c->ndim != 2 || c->shape[0] != M ||
            c->shape[1] != K || !fl_tensor_is_contiguous(c) || !aligned16(fl_tensor_data(c)))
            return NULL;
        return fl_tensor_data(c);
    };

    const bool fp8_ok = K % 16 == 0 && N % 16 == 0 && !(a->dtype == FL_E5M2 && b->dtype == FL_E5M2) && aligned16(d) &&
                        (!a_k || aligned16(ad)) && (!b_k || aligned16(bd)) && device_cc() >= 89;
    if (fp8_ok) {
        fl_cu_scratch acopy, bcopy;
        const void *A = ad, *B = bd;
        if (!a_k && !(A = cached_a())) {   /* a stored [K, M] → [M, K], unless the cast already wrote it */
            FL_TRY(acopy.alloc((size_t)(M * K)));
            FL_TRY(launch_transpose(OUT_BYTES, ad, acopy.p, K, M));
            A = acopy.p;
        }
        if (!b_k) {   /* b stored [K, N] → [N, K], from the cache when it holds it */
            if (!(B = cached(b->dtype))) {
                auto fill = [&](void *out) { return launch_transpose(OUT_BYTES, bd, out, K, N); };
                if (b_cache) FL_TRY(make_cache(b_cache, b->dtype, N, K, fill, &B));
                else {
                    FL_TRY(bcopy.alloc((size_t)(N * K)));
                    FL_TRY(fill(bcopy.p));
                    B = bcopy.p;
                }
            }
        }
        fl_cuda_gemm_args g;
        fl_cuda_gemm_args_init(&g, M, N, K);
        g.a = A; g.a_dtype = a->dtype; g.lda = K;
        g.b = B; g.b_dtype = b->dtype; g.ldb = K;
        g.d = d; g.d_dtype = FL_F32; g.ldd = N;
        g.fast_accum = fast_accum;
        const bool per_tensor = !e.a_vec && !e.b_vec;
        if (per_tensor) {
            g.a_scale_inv = e.sa;
            g.b_scale_inv = e.sb;
            g.bias = e.bias;
            g.bias_dtype = (fl_dtype)e.bias_dt;
        } else {
            FL_TRY(unit_scale(&g.a_scale_inv));
            g.b_scale_inv = g.a_scale_inv;
        }
        const fl_status st = fl_cuda_gemm(&g, NULL);
        if (st == FL_OK) return per_tensor ? FL_OK : launch_epilogue(d, M, N, e);
        if (st != FL_EUNSUPPORTED) return st;
        /* cuBLASLt has no FP8 kernel for this case: the bf16 route below gives the same products. */
    }

    fl_cu_scratch a16, b16;
    FL_TRY(a16.alloc((size_t)(M * K) * sizeof(uint16_t)));
    FL_TRY(decode_kmajor(ad, a_k, a->dtype, M, K, static_cast<uint16_t *>(a16.p)));
    /* The slot holds what was derived from b's bytes for a b stored [K, N] (the FP8 linear's dgrad: Wᵀ's
     * bytes). A b already K-major (the forward's Wᵀ view of W) needs nothing of it, and must not read it: for
     * a square weight the slot's [N, K] shape matches while its orientation is the transpose of b's. */
    const bool use_slot = b_cache && !b_k;
    const void *B16 = use_slot ? cached(FL_BF16) : NULL;
    if (!B16) {
        /* a K-major FP8 copy made earlier decodes without a transpose */
        const void *kbytes = use_slot ? cached(b->dtype) : NULL;
        auto fill = [&](void *out) {
            uint16_t *o = static_cast<uint16_t *>(out);
            return kbytes ? launch_decode(static_cast<const uint8_t *>(kbytes), o, (size_t)(N * K), b->dtype)
                          : decode_kmajor(bd, b_k, b->dtype, N, K, o);
        };
        if (use_slot) FL_TRY(make_cache(b_cache, FL_BF16, N, K, fill, &B16));
        else {
            FL_TRY(b16.alloc((size_t)(N * K) * sizeof(uint16_t)));
            FL_TRY(fill(b16.p));
            B16 = b16.p;
        }
    }
    fl_cuda_gemm_args g;
    fl_cuda_gemm_args_init(&g, M, N, K);
    g.a = a16.p; g.a_dtype = FL_BF16; g.lda = K;
    g.b = B16; g.b_dtype = FL_BF16; g.ldb = K;
    g.d = d; g.d_dtype = FL_F32; g.ldd = N;
    FL_TRY(fl_cuda_gemm(&g, NULL));
    return launch_epilogue(d, M, N, e);
}

/* ---- the device code on the host, for tests (declared in tests/c/test_gpu_train_ops.c) ------------- */

/* 1 when this GPU runs FP8 GEMMs natively (sm_89+); only meaningful with a GPU. */
extern "C" int fl_cuda_fp8_gemm_native(void) { return device_cc() >= 89; }

extern "C" uint16_t fl_cuda_fp8_bf16_host(uint8_t b, int fmt) { return fp8_bf16_bits(b, fmt == FL_E5M2); }

/* fp8_transpose_kernel run tile by tile, thread by thread: src [R, C] → dst [C, R], bytes (decode_fmt
 * FL_F32) or their bf16 decode (decode_fmt FL_E4M3 / FL_E5M2). */
extern "C" void fl_cuda_fp8_transpose_host(const uint8_t *src, void *dst, int64_t R, int64_t C, int decode_fmt) {
    const Tiles t = tiles_of(R, C);
    uint8_t tile[kTile * kPitch];
    for (int64_t i = 0; i < t.count; i++) {
        int64_t r0, c0;
        tile_origin(t, i, r0, c0);
        for (int th = 0; th < kThreads; th++) tile_load(src, tile, t, r0, c0, th % kTile, th / kTile);
        for (int th = 0; th < kThreads; th++) {
            const int tx = th % kTile, ty = th / kTile;
            if (decode_fmt == FL_E4M3) tile_store<OUT_E4M3_BF16>(static_cast<uint16_t *>(dst), tile, t, r0, c0, tx, ty);
            else if (decode_fmt == FL_E5M2) tile_store<OUT_E5M2_BF16>(static_cast<uint16_t *>(dst), tile, t, r0, c0, tx, ty);
            else tile_store<OUT_BYTES>(static_cast<uint8_t *>(dst), tile, t, r0, c0, tx, ty);
        }
    }
}

/* fp8_epilogue_kernel's element code over a host [M, N] d. */
extern "C" void fl_cuda_fp8_epilogue_host(float *d, int64_t M, int64_t N, const float *sa, bool a_vec, const float *sb,
                                          bool b_vec, const void *bias, int bias_dt) {
    Epi e;
    e.sa = sa; e.sb = sb; e.a_vec = a_vec; e.b_vec = b_vec; e.bias = bias; e.bias_dt = bias_dt;
    for (int64_t i = 0; i < M * N; i++) epi_at(d, i, N, e);
}
