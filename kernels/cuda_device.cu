/* cuda_device.cu — the "cuda" device: probing and lazy registration (with a one-line CPU-fallback
 * notice), a caching allocator, host<->device copies on one stream, and the quantize/dequantize/amax
 * entries of the device table (core/device.h). Every CUDA error becomes FL_EDEVICE, never an abort. */
#include "fl_cuda.h"
#include "cuda_entries.h"
extern "C" {
#include "prof_clock.h"
#include "dist.h"
}
#include <cmath>
#include <mutex>
#include <new>
#include <stdio.h>
#include <string.h>
#include <unordered_map>
#include <vector>

namespace {

/* Process-wide backend state: one GPU (`ordinal`: the local rank modulo the GPUs visible, as torch's
 * cuda:LOCAL_RANK; NCCL joins its communicator on the same one), one stream. Guarded by mu. */
std::mutex mu;
int reg_state;                 /* 0 untried, 1 registered, -1 unavailable */
char reason[256];              /* "cudaXxx failed: <code name>: <string>" */
char reason_short[128];        /* the CUDA error string alone, for the notice */
cudaStream_t stream;
int sm_count = 1;
int ordinal = -1;              /* the GPU in use, once initialised */

/* Caching allocator: blocks are rounded to a size class (powers of two up to 1 MiB, then multiples
 * of 2 MiB), and freed blocks wait on a per-class free list instead of going back to cudaFree, so
 * steady-state training does no cudaMalloc per op. Reuse is safe because all work is on `stream`. */
std::unordered_map<size_t, std::vector<void *>> free_lists;
std::unordered_map<void *, size_t> live;
size_t bytes_live, bytes_peak, bytes_reserved, bytes_reserved_peak;

size_t size_class(size_t n) {
    if (n <= 512) return 512;
    if (n <= ((size_t)1 << 20)) {
        size_t c = 1024;
        while (c < n) c <<= 1;
        return c;
    }
    const size_t two_mib = (size_t)2 << 20;
    return (n + two_mib - 1) / two_mib * two_mib;
}

void empty_cache_locked(void) {
    for (auto &kv : free_lists) {
        for (void *p : kv.second) { cudaFree(p); bytes_reserved -= kv.first; }
        kv.second.clear();
    }
}

__global__ void probe_kernel(void) {}

fl_status cuda_alloc(size_t nbytes, void **ptr) {
    size_t c = size_class(nbytes);
    std::lock_guard<std::mutex> g(mu);
    std::vector<void *> &fl = free_lists[c];
    void *p = NULL;
    if (!fl.empty()) { p = fl.back(); fl.pop_back(); }
    else {
        cudaError_t e = cudaMalloc(&p, c);
        if (e != cudaSuccess) {             /* give the cache back to the driver and try once more */
            (void)cudaGetLastError();
            empty_cache_locked();
            e = cudaMalloc(&p, c);
        }
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            *ptr = NULL;
            return FL_ERR(FL_ENOMEM, "cudaMalloc failed: %s: %s (asked for %zu bytes with %zu allocated)",
                          cudaGetErrorName(e), cudaGetErrorString(e), nbytes, bytes_live);
        }
        bytes_reserved += c;
        if (bytes_reserved > bytes_reserved_peak) bytes_reserved_peak = bytes_reserved;
    }
    live[p] = c;
    bytes_live += c;
    if (bytes_live > bytes_peak) bytes_peak = bytes_live;
    *ptr = p;
    return FL_OK;
}

void cuda_free(void *p) {
    if (!p) return;
    std::lock_guard<std::mutex> g(mu);
    auto it = live.find(p);
    if (it == live.end()) return;          /* not ours: ignore rather than corrupt the cache */
    bytes_live -= it->second;
    free_lists[it->second].push_back(p);
    live.erase(it);
}

fl_status cuda_to_host(void *host_dst, const void *dev_src, size_t nbytes) {
    if (!nbytes) return FL_OK;
    FL_CUDA_CHECK(cudaMemcpyAsync(host_dst, dev_src, nbytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
    FL_CUDA_CHECK(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return FL_OK;
}

fl_status cuda_from_host(void *dev_dst, const void *host_src, size_t nbytes) {
    if (!nbytes) return FL_OK;
    FL_CUDA_CHECK(cudaMemcpyAsync(dev_dst, host_src, nbytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
    /* The caller may free or reuse host_src as soon as we return. */
    FL_CUDA_CHECK(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return FL_OK;
}

/* A block of scratch device memory that gives itself back (error paths included). */
struct Scratch {
    void *p = NULL;
    ~Scratch() { cuda_free(p); }
};

/* The tensor seen as [outer, len, inner] around `axis`. */
void split_axis(const fl_tensor *t, int axis, size_t *outer, size_t *len, size_t *inner) {
    size_t o = 1, in = 1;
    for (int d = 0; d < axis; d++) o *= (size_t)t->shape[d];
    for (int d = axis + 1; d < t->ndim; d++) in *= (size_t)t->shape[d];
    *outer = o; *len = (size_t)t->shape[axis]; *inner = in;
}

bool src_dtype_ok(fl_dtype d) { return d == FL_F32 || d == FL_BF16 || d == FL_F16; }

fl_status check_src(const fl_tensor *src, const char *op) {
    if (src->device != FL_DEV_CUDA || !fl_tensor_is_contiguous(src))
        return FL_ERR(FL_EINVAL, "%s on cuda: expected a contiguous cuda tensor, got a %s%s one", op,
                      fl_tensor_is_contiguous(src) ? "" : "non-contiguous ", fl_device_name(src->device));
    if (!src_dtype_ok(src->dtype))
        return FL_ERR(FL_EUNSUPPORTED, "%s on cuda: expected an fp32, bf16 or fp16 source, got %s", op,
                      fl_format(src->dtype)->name);
    return FL_OK;
}

/* ---- cast statistics without a stream sync per cast ------------------------------------------
 * Each cast adds its counters into a slot of one device array; the tensor (and every recipe role that
 * observes the cast) holds a future on the slot (tensor.h fl_stats_future). The first wait copies every
 * slot in use to a pinned mirror at once, then syncs; futures of casts queued before that copy read the
 * mirror without another sync. So a training step waits once (at the recipe update), not once per cast.
 * A slot is reused only after its last holder lets go. When every slot is held, casts fall back to a
 * synchronous read. */
constexpr int kStatSlots = 1 << 14;

struct StatsArena {
    std::mutex mu;
    fl_cuda_qstats *dev = NULL, *host = NULL;   /* kStatSlots each; host is pinned */
    std::vector<int> free_slots;
    int high = 0;                               /* slots [0, high) have been handed out at least once */
    unsigned long long launched = 0, mirrored = 0;
    bool failed = false;                        /* allocation failed once: always use the fallback */
} arena;

struct CudaStatsFuture {
    fl_stats_future base;
    int slot;
    unsigned long long seq;                     /* arena.launched when the cast was queued */
};

fl_cast_stats stats_from(const fl_cuda_qstats &h) {
    fl_cast_stats st;
    unsigned b = h.amax_bits;
    memcpy(&st.amax, &b, sizeof b);
    st.underflow = (int64_t)h.underflow;
    st.saturated = (int64_t)h.saturated;
    st.nan = (int64_t)h.nan;
    return st;
}

fl_status future_wait(fl_stats_future *f, fl_cast_stats *out) {
    CudaStatsFuture *cf = reinterpret_cast<CudaStatsFuture *>(f);
    std::lock_guard<std::mutex> g(arena.mu);
    if (cf->seq > arena.mirrored) {
        unsigned long long upto = arena.launched;
        FL_CUDA_CHECK(cudaMemcpyAsync(arena.host, arena.dev, (size_t)arena.high * sizeof(fl_cuda_qstats),
                                      cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync (cast statistics)");
        FL_CUDA_CHECK(cudaStreamSynchronize(stream), "cudaStreamSynchronize (cast statistics)");
        arena.mirrored = upto;
    }
    *out = stats_from(arena.host[cf->slot]);
    return FL_OK;
}

void future_destroy(fl_stats_future *f) {
    CudaStatsFuture *cf = reinterpret_cast<CudaStatsFuture *>(f);
    {
        std::lock_guard<std::mutex> g(arena.mu);
        arena.free_slots.push_back(cf->slot);
    }
    delete cf;
}

/* Where a cast's counters go: an arena slot (then take() makes the future) or, when none is free, a
 * scratch block read back synchronously by finish(). */
struct StatsSink {
    fl_cuda_qstats *d = NULL;
    int slot = -1;
    Scratch scratch;

    fl_status open() {
        {
            std::lock_guard<std::mutex> g(arena.mu);
            if (!arena.dev && !arena.failed) {
                void *dp = NULL, *hp = NULL;
                if (cudaMalloc(&dp, kStatSlots * sizeof(fl_cuda_qstats)) != cudaSuccess ||
                    cudaHostAlloc(&hp, kStatSlots * sizeof(fl_cuda_qstats), cudaHostAllocDefault) != cudaSuccess) {
                    (void)cudaGetLastError();
                    if (dp) cudaFree(dp);
                    arena.failed = true;
                } else {
                    arena.dev = (fl_cuda_qstats *)dp;
                    arena.host = (fl_cuda_qstats *)hp;
                }
            }
            if (arena.dev) {
                if (!arena.free_slots.empty()) { slot = arena.free_slots.back(); arena.free_slots.pop_back(); }
                else if (arena.high < kStatSlots) slot = arena.high++;
            }
            if (slot >= 0) d = arena.dev + slot;
        }
        if (!d) {
            FL_TRY(cuda_alloc(sizeof(fl_cuda_qstats), &scratch.p));
            d = (fl_cuda_qstats *)scratch.p;
        }
        fl_status st = FL_OK;
        cudaError_t e = cudaMemsetAsync(d, 0, sizeof(fl_cuda_qstats), stream);
        if (e != cudaSuccess) { st = fl_cuda_fail(e, "cudaMemsetAsync", __FILE__, __LINE__); release_slot(); }
        return st;
    }
    void release_slot() {
        if (slot < 0) return;
        std::lock_guard<std::mutex> g(arena.mu);
        arena.free_slots.push_back(slot);
        slot = -1;
    }
    /* After the kernels are queued: dst's statistics as a future, or read now. */
    fl_status finish(fl_tensor *dst) {
        fl_stats_future_release(dst->qfuture);
        dst->qfuture = NULL;
        if (slot >= 0) {
            CudaStatsFuture *f = new (std::nothrow) CudaStatsFuture;
            if (f) {
                f->base.refcount = 1;
                f->base.wait = future_wait;
                f->base.destroy = future_destroy;
                f->slot = slot;
                {
                    std::lock_guard<std::mutex> g(arena.mu);
                    f->seq = ++arena.launched;
                }
                slot = -1;
                dst->qfuture = &f->base;
                return FL_OK;
            }
        }
        fl_cuda_qstats h;
        FL_CUDA_CHECK(cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
        FL_CUDA_CHECK(cudaStreamSynchronize(stream), "cudaStreamSynchronize");   /* also surfaces kernel faults */
        release_slot();
        dst->qstats = stats_from(h);
        return FL_OK;
    }
    ~StatsSink() { release_slot(); }
};

/* amax per tensor or per index along axis into host memory (one sync: the caller wants the values). */
fl_status run_amax(const fl_tensor *src, int axis, float *out) {
    size_t n = (size_t)fl_tensor_numel(src), outer = 1, len = 1, inner = n;
    if (axis >= 0) {
        if (axis >= src->ndim)
            return FL_ERR(FL_EINVAL, "amax on cuda: axis %d out of range for a %d-d tensor", axis, src->ndim);
        split_axis(src, axis, &outer, &len, &inner);
    }
    /* scratch layout: [stats][row amax bits: len] */
    size_t bytes = sizeof(fl_cuda_qstats) + (axis >= 0 ? len * sizeof(float) : 0);
    Scratch s;
    FL_TRY(cuda_alloc(bytes, &s.p));
    fl_cuda_qstats *dstats = (fl_cuda_qstats *)s.p;
    unsigned *drow = (unsigned *)(dstats + 1);
    FL_CUDA_CHECK(cudaMemsetAsync(s.p, 0, bytes, stream), "cudaMemsetAsync");
    const void *x = fl_tensor_data(src);
    if (axis < 0) FL_TRY(cuda_quantize(x, src->dtype, NULL, n, FL_E4M3, 1.0f, NULL, FL_SATURATE, dstats, stream));
    else FL_TRY(cuda_quantize_rows(x, src->dtype, NULL, outer, len, inner, FL_E4M3, NULL, FL_SATURATE, dstats, drow, stream));
    if (axis >= 0) {
        FL_CUDA_CHECK(cudaMemcpyAsync(out, drow, len * sizeof(float), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
    } else {
        FL_CUDA_CHECK(cudaMemcpyAsync(out, &dstats->amax_bits, sizeof(float), cudaMemcpyDeviceToHost, stream),
                      "cudaMemcpyAsync");
    }
    FL_CUDA_CHECK(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return FL_OK;
}

/* Checks shared by both quantize entries; the number of scales. */
fl_status check_quantize(const fl_tensor *dst, const fl_tensor *src, int axis, size_t *nscale) {
    FL_TRY(check_src(src, "quantize"));
    if (dst->dtype != FL_E4M3 && dst->dtype != FL_E5M2)
        return FL_ERR(FL_EINVAL, "quantize on cuda: expected an e4m3 or e5m2 destination, got %s",
                      fl_format(dst->dtype)->name);
    if (dst->device != FL_DEV_CUDA || !fl_tensor_is_contiguous(dst) || fl_tensor_numel(dst) != fl_tensor_numel(src))
        return FL_ERR(FL_EINVAL, "quantize on cuda: expected a contiguous cuda destination of %lld elements",
                      (long long)fl_tensor_numel(src));
    if (axis >= src->ndim)
        return FL_ERR(FL_EINVAL, "quantize on cuda: axis %d out of range for a %d-d tensor", axis, src->ndim);
    *nscale = axis < 0 ? 1 : (size_t)src->shape[axis];
    const fl_tensor *si = dst->scale_inv;
    if (!si || si->dtype != FL_F32 || si->device != FL_DEV_CUDA || (size_t)fl_tensor_numel(si) != *nscale)
        return FL_ERR(FL_EINVAL, "quantize on cuda: expected dst->scale_inv as %zu fp32 value(s) on cuda", *nscale);
    return FL_OK;
}

/* The cast of both entries, all on the stream (no host wait): host scales (`scales`) or, when `current`,
 * scales the device derives from src's amax (margin, pow2); scale_inv written on the device. */
fl_status quantize_async(fl_tensor *dst, const fl_tensor *src, const float *scales, bool current, int margin,
                         bool pow2, int axis, fl_overflow p) {
    size_t nscale;
    FL_TRY(check_quantize(dst, src, axis, &nscale));
    size_t n = (size_t)fl_tensor_numel(src), outer = 1, len = 1, inner = n;
    if (axis >= 0) split_axis(src, axis, &outer, &len, &inner);
    float *si = (float *)fl_tensor_data(dst->scale_inv);
    const void *x = fl_tensor_data(src);
    uint8_t *q = (uint8_t *)fl_tensor_data(dst);
    StatsSink sink;
    FL_TRY(sink.open());
    /* scratch: [amax-pass stats][row amax bits: len][scales: len] */
    Scratch s;
    size_t bytes = sizeof(fl_cuda_qstats) + 2 * nscale * sizeof(float);
    FL_TRY(cuda_alloc(bytes, &s.p));
    fl_cuda_qstats *pass = (fl_cuda_qstats *)s.p;
    unsigned *drow = (unsigned *)(pass + 1);
    float *dscales = (float *)(drow + nscale);
    FL_CUDA_CHECK(cudaMemsetAsync(s.p, 0, sizeof(fl_cuda_qstats) + nscale * sizeof(float), stream), "cudaMemsetAsync");
    if (current) {
        if (axis < 0) {
            FL_TRY(cuda_quantize(x, src->dtype, NULL, n, dst->dtype, 1.0f, NULL, FL_SATURATE, pass, stream));
            FL_TRY(cuda_scales(1, &pass->amax_bits, NULL, 0.0f, dst->dtype, margin, pow2, dscales, si, stream));
        } else {
            FL_TRY(cuda_quantize_rows(x, src->dtype, NULL, outer, len, inner, dst->dtype, NULL, FL_SATURATE, pass, drow,
                                      stream));
            FL_TRY(cuda_scales(len, drow, NULL, 0.0f, dst->dtype, margin, pow2, dscales, si, stream));
        }
    } else if (axis < 0) {
        FL_TRY(cuda_scales(1, NULL, NULL, scales[0], dst->dtype, 0, false, NULL, si, stream));
    } else {
        /* pageable source: the copy is staged before cudaMemcpyAsync returns, so `scales` may go right away */
        FL_CUDA_CHECK(cudaMemcpyAsync(dscales, scales, len * sizeof(float), cudaMemcpyHostToDevice, stream),
                      "cudaMemcpyAsync");
        FL_TRY(cuda_scales(len, NULL, dscales, 0.0f, dst->dtype, 0, false, NULL, si, stream));
    }
    if (axis < 0)
        FL_TRY(cuda_quantize(x, src->dtype, q, n, dst->dtype, current ? 1.0f : scales[0], current ? dscales : NULL, p,
                             sink.d, stream));
    else   /* the row amaxes come out the same again: atomicMax of equal values */
        FL_TRY(cuda_quantize_rows(x, src->dtype, q, outer, len, inner, dst->dtype, dscales, p, sink.d, drow, stream));
    return sink.finish(dst);
}

fl_status fl_cuda_dev_quantize_transpose(fl_tensor *dst, fl_tensor *dst_t, const fl_tensor *src, const float *scale,
                                        int margin, bool pow2, fl_overflow p) {
    size_t nscale;
    FL_TRY(check_quantize(dst, src, -1, &nscale));
    if (src->ndim != 2) return FL_ERR(FL_EINVAL, "quantize_transpose on cuda: expected a 2-D source, got %d dims", src->ndim);
    if (p != FL_SATURATE) return FL_ERR(FL_EUNSUPPORTED, "quantize_transpose on cuda: only the saturating cast");
    if (margin < 0 || margin > 64) return FL_ERR(FL_EINVAL, "quantize_transpose on cuda: margin must be in 0..64, got %d", margin);
    const int64_t rows = src->shape[0], cols = src->shape[1];
    if (!dst_t || dst_t->dtype != dst->dtype || dst_t->device != FL_DEV_CUDA || dst_t->ndim != 2 ||
        dst_t->shape[0] != cols || dst_t->shape[1] != rows || !fl_tensor_is_contiguous(dst_t))
        return FL_ERR(FL_EINVAL, "quantize_transpose on cuda: expected a contiguous %s [%lld, %lld] cuda destination for "
                      "the transposed copy", fl_format(dst->dtype)->name, (long long)cols, (long long)rows);
    float *si = (float *)fl_tensor_data(dst->scale_inv);
    StatsSink sink;
    FL_TRY(sink.open());
    Scratch s;   /* [amax-pass stats][the scale] */
    FL_TRY(cuda_alloc(sizeof(fl_cuda_qstats) + sizeof(float), &s.p));
    fl_cuda_qstats *pass = (fl_cuda_qstats *)s.p;
    float *dscale = (float *)(pass + 1);
    FL_CUDA_CHECK(cudaMemsetAsync(s.p, 0, sizeof(fl_cuda_qstats), stream), "cudaMemsetAsync");
    const void *x = fl_tensor_data(src);
    if (!scale) {
        FL_TRY(cuda_quantize(x, src->dtype, NULL, (size_t)(rows * cols), dst->dtype, 1.0f, NULL, FL_SATURATE, pass, stream));
        FL_TRY(cuda_scales(1, &pass->amax_bits, NULL, 0.0f, dst->dtype, margin, pow2, dscale, si, stream));
    } else {
        FL_TRY(cuda_scales(1, NULL, NULL, *scale, dst->dtype, 0, false, dscale, si, stream));
    }
    if (rows * cols > 0)
        FL_TRY(fl_cuda_cast_transpose(x, src->dtype, rows, cols, dst->dtype, dscale, NULL, (uint8_t *)fl_tensor_data(dst),
                                      (uint8_t *)fl_tensor_data(dst_t), sink.d, NULL, stream));
    FL_TRY(sink.finish(dst));
    fl_stats_future_release(dst_t->qfuture);
    dst_t->qfuture = fl_stats_future_retain(dst->qfuture);
    dst_t->qstats = dst->qstats;
    return FL_OK;
}

fl_status fl_cuda_dev_quantize(fl_tensor *dst, const fl_tensor *src, const float *scales, int axis, fl_overflow p) {
    return quantize_async(dst, src, scales, false, 0, false, axis, p);
}

fl_status fl_cuda_dev_quantize_current(fl_tensor *dst, const fl_tensor *src, int axis, int margin, bool pow2,
                                      fl_overflow p) {
    if (margin < 0 || margin > 64) return FL_ERR(FL_EINVAL, "quantize on cuda: margin must be in 0..64, got %d", margin);
    return quantize_async(dst, src, NULL, true, margin, pow2, axis, p);
}

fl_status fl_cuda_dev_dequantize(fl_tensor *dst, const fl_tensor *q) {
    if (q->dtype != FL_E4M3 && q->dtype != FL_E5M2)
        return FL_ERR(FL_EINVAL, "dequantize on cuda: expected an e4m3 or e5m2 tensor, got %s",
                      fl_format(q->dtype)->name);
    if (q->device != FL_DEV_CUDA || dst->device != FL_DEV_CUDA || !fl_tensor_is_contiguous(q) ||
        !fl_tensor_is_contiguous(dst) || fl_tensor_numel(dst) != fl_tensor_numel(q))
        return FL_ERR(FL_EUNSUPPORTED, "dequantize on cuda: expected contiguous cuda tensors of equal size");
    if (!src_dtype_ok(dst->dtype))
        return FL_ERR(FL_EINVAL, "dequantize on cuda: expected an fp32, bf16 or fp16 destination, got %s",
                      fl_format(dst->dtype)->name);
    size_t n = (size_t)fl_tensor_numel(q), outer = 1, len = 1, inner = n;
    if (q->scale_axis >= 0) split_axis(q, q->scale_axis, &outer, &len, &inner);
    if (!q->scale_inv || (size_t)fl_tensor_numel(q->scale_inv) != len || q->scale_inv->device != FL_DEV_CUDA)
        return FL_ERR(FL_EINVAL, "dequantize on cuda: expected scale_inv with %zu value(s) on cuda", len);
    return cuda_dequantize((const uint8_t *)fl_tensor_data(q), q->dtype, fl_tensor_data(dst), dst->dtype, n,
                           (const float *)fl_tensor_data(q->scale_inv), len, inner, stream);
}

fl_status fl_cuda_dev_amax(const fl_tensor *src, int axis, float *out) {
    FL_TRY(check_src(src, "amax"));
    return run_amax(src, axis, out);
}

const fl_device cuda_device = {
    .name = "cuda",
    .alloc = cuda_alloc,
    .free = cuda_free,
    .to_host = cuda_to_host,
    .from_host = cuda_from_host,
    .copy = fl_cuda_dev_copy,
    .fill = fl_cuda_dev_fill,
    .binary = fl_cuda_dev_binary,
    .binary_scalar = fl_cuda_dev_binary_scalar,
    .unary = fl_cuda_dev_unary,
    .reduce = fl_cuda_dev_reduce,
    .norm_rescue = fl_cuda_dev_norm_rescue,
    .norm_rescue_bwd = fl_cuda_dev_norm_rescue_bwd,
    .matmul = fl_cuda_dev_matmul,
    .quantize = fl_cuda_dev_quantize,
    .quantize_current = fl_cuda_dev_quantize_current,
    .quantize_transpose = fl_cuda_dev_quantize_transpose,
    .dequantize = fl_cuda_dev_dequantize,
    .amax = fl_cuda_dev_amax,
    .act_fwd = fl_cuda_dev_act_fwd,
    .act_bwd = fl_cuda_dev_act_bwd,
    .softmax_fwd = fl_cuda_dev_softmax_fwd,
    .softmax_bwd = fl_cuda_dev_softmax_bwd,
    .cross_entropy_fwd = fl_cuda_dev_cross_entropy_fwd,
    .cross_entropy_bwd = fl_cuda_dev_cross_entropy_bwd,
    .mse_fwd = fl_cuda_dev_mse_fwd,
    .mse_bwd = fl_cuda_dev_mse_bwd,
    .layernorm_fwd = fl_cuda_dev_layernorm_fwd,
    .layernorm_bwd = fl_cuda_dev_layernorm_bwd,
    .embedding_fwd = fl_cuda_dev_embedding_fwd,
    .embedding_bwd = fl_cuda_dev_embedding_bwd,
    .dropout_fwd = fl_cuda_dev_dropout_fwd,
    .dropout_bwd = fl_cuda_dev_dropout_bwd,
    .sdpa_fwd = fl_cuda_dev_sdpa_fwd,
    .sdpa_bwd = fl_cuda_dev_sdpa_bwd,
    .sdpa_flash_fwd = fl_cuda_dev_sdpa_flash_fwd,
    .sdpa_flash_bwd = fl_cuda_dev_sdpa_flash_bwd,
    .bias_add = fl_cuda_dev_bias_add,
    .sgd = fl_cuda_dev_sgd,
    .adamw = fl_cuda_dev_adamw,
    .msamp_adamw = fl_cuda_dev_msamp_adamw,
    .sumsq = fl_cuda_dev_sumsq,
    .fp8_gemm = fl_cuda_dev_fp8_gemm,
};

/* Probe without side effects on stderr. Returns the device count, or 0 with `reason` set. */
int probe_locked(void) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(reason, sizeof reason, "cudaGetDeviceCount failed: %s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
        snprintf(reason_short, sizeof reason_short, "%s", cudaGetErrorString(e));
        return 0;
    }
    if (count == 0) {
        snprintf(reason, sizeof reason, "cudaGetDeviceCount: no CUDA-capable device is detected");
        snprintf(reason_short, sizeof reason_short, "no CUDA-capable device is detected");
    }
    return count;
}

/* Make this process's GPU current (the launcher's local rank modulo the `count` visible: one GPU per process
 * on a node, whether CUDA_VISIBLE_DEVICES shows each process one GPU or all of them), create the stream,
 * and check our kernels have an image for this GPU. */
bool init_locked(int count) {
    cudaError_t e;
    const char *what = "cudaSetDevice";
    cudaFuncAttributes fa;
    const int local = fl_dist_env_local_rank();
    const int dev = count > 0 && local > 0 ? local % count : 0;
    if ((e = cudaSetDevice(dev)) != cudaSuccess) goto fail;
    what = "cudaFree(0) (context creation)";
    if ((e = cudaFree(0)) != cudaSuccess) goto fail;
    what = "cudaFuncGetAttributes (fp8lab is built for sm_89 and sm_90, and compute_90 PTX for later GPUs)";
    if ((e = cudaFuncGetAttributes(&fa, probe_kernel)) != cudaSuccess) goto fail;
    what = "cudaDeviceGetAttribute";
    if ((e = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) goto fail;
    what = "cudaStreamCreateWithFlags";
    if ((e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess) goto fail;
    ordinal = dev;
    return true;
fail:
    (void)cudaGetLastError();
    snprintf(reason, sizeof reason, "%s failed: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
    snprintf(reason_short, sizeof reason_short, "%s", cudaGetErrorString(e));
    return false;
}

/* Probe and bring up the device once per process, quietly; the outcome sticks. */
int ensure_locked(void) {
    if (reg_state == 0) {
        const int count = probe_locked();
        reg_state = count > 0 && init_locked(count) ? 1 : -1;
    }
    return reg_state;
}

bool notice_printed;

/* ---- the profiler's device clock (core/prof_clock.h): CUDA events on the stream, pooled --------- */
std::mutex clock_mu;
std::vector<cudaEvent_t> clock_events;   /* handle h is clock_events[h - 1] */
std::vector<uint64_t> clock_free;

cudaEvent_t clock_event(uint64_t h) {
    std::lock_guard<std::mutex> g(clock_mu);
    return h && h <= clock_events.size() ? clock_events[h - 1] : NULL;
}

uint64_t clock_mark(void) {
    std::lock_guard<std::mutex> g(clock_mu);
    uint64_t h;
    if (!clock_free.empty()) {
        h = clock_free.back();
        clock_free.pop_back();
    } else {
        cudaEvent_t e;
        if (cudaEventCreate(&e) != cudaSuccess) { (void)cudaGetLastError(); return 0; }
        clock_events.push_back(e);
        h = clock_events.size();
    }
    if (cudaEventRecord(clock_events[h - 1], stream) != cudaSuccess) {
        (void)cudaGetLastError();
        clock_free.push_back(h);
        return 0;
    }
    return h;
}

uint64_t clock_origin(int64_t *cpu_ns) {
    if (cudaStreamSynchronize(stream) != cudaSuccess) { (void)cudaGetLastError(); return 0; }
    uint64_t h = clock_mark();
    if (h && cudaEventSynchronize(clock_event(h)) != cudaSuccess) { (void)cudaGetLastError(); return 0; }
    *cpu_ns = fl_prof_now_ns();
    return h;
}

bool clock_elapsed(uint64_t a, uint64_t b, int64_t *ns) {
    cudaEvent_t ea = clock_event(a), eb = clock_event(b);
    float ms = 0.0f;
    if (!ea || !eb || cudaEventSynchronize(eb) != cudaSuccess || cudaEventElapsedTime(&ms, ea, eb) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    *ns = (int64_t)std::llround((double)ms * 1e6);
    return true;
}

void clock_release(uint64_t h) {
    std::lock_guard<std::mutex> g(clock_mu);
    if (h && h <= clock_events.size()) clock_free.push_back(h);
}

const fl_prof_device_clock cuda_clock = { clock_origin, clock_mark, clock_elapsed, clock_release };

}  // namespace

cudaStream_t fl_cuda_stream(void) { return stream; }
int fl_cuda_sm_count(void) { return sm_count > 0 ? sm_count : 1; }

extern "C" fl_status fl_cuda_register(void) {
    bool print = false;
    int state;
    {
        std::lock_guard<std::mutex> g(mu);
        state = ensure_locked();
        if (state < 0 && !notice_printed) print = notice_printed = true;
    }
    if (state > 0) {
        fl_device_register(FL_DEV_CUDA, &cuda_device);
        fl_prof_set_device_clock(&cuda_clock);   /* activities "cuda": device time of every event */
        return FL_OK;
    }
    if (print) {    /* once per process, and only when someone asked for the GPU */
        fprintf(stderr, "fp8lab: CUDA built in but no GPU available (%s)\n", reason_short);
        fflush(stderr);
    }
    return FL_ERR(FL_EDEVICE, "no CUDA GPU available: %s", reason);
}

extern "C" int fl_cuda_device_ordinal(void) {
    std::lock_guard<std::mutex> g(mu);
    return ensure_locked() > 0 ? ordinal : -1;
}

/* A GPU counts only if fp8lab can actually run on it (context and kernel image checked). */
extern "C" int fl_cuda_device_count(void) {
    std::lock_guard<std::mutex> g(mu);
    if (ensure_locked() < 0) return 0;
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

extern "C" const char *fl_cuda_unavailable_reason(void) {
    std::lock_guard<std::mutex> g(mu);
    return reg_state > 0 ? "" : reason;
}

extern "C" fl_status fl_cuda_synchronize(void) {
    /* Like a first tensor on the GPU, synchronize brings the device up (or prints the notice). */
    if (fl_cuda_register() != FL_OK)
        return FL_ERR(FL_EDEVICE, "cuda synchronize: no CUDA GPU available (%s)", reason);
    FL_CUDA_CHECK(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return FL_OK;
}

extern "C" size_t fl_cuda_memory_allocated(void) { std::lock_guard<std::mutex> g(mu); return bytes_live; }
extern "C" size_t fl_cuda_max_memory_allocated(void) { std::lock_guard<std::mutex> g(mu); return bytes_peak; }
extern "C" void fl_cuda_reset_peak_memory(void) {   /* both peaks, as torch's reset_peak_memory_stats */
    std::lock_guard<std::mutex> g(mu);
    bytes_peak = bytes_live;
    bytes_reserved_peak = bytes_reserved;
}
extern "C" size_t fl_cuda_memory_reserved(void) { std::lock_guard<std::mutex> g(mu); return bytes_reserved; }
extern "C" size_t fl_cuda_max_memory_reserved(void) { std::lock_guard<std::mutex> g(mu); return bytes_reserved_peak; }
extern "C" void fl_cuda_empty_cache(void) {
    std::lock_guard<std::mutex> g(mu);
    if (reg_state > 0) empty_cache_locked();
}
