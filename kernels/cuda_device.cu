/* cuda_device.cu — the "cuda" device: probing and lazy registration (with a one-line CPU-fallback
 * notice), a caching allocator, host<->device copies on one stream, and the quantize/dequantize/amax
 * entries of the device table (core/device.h). Every CUDA error becomes FL_EDEVICE, never an abort. */
#include "fl_cuda.h"
#include "cuda_entries.h"
#include <mutex>
#include <stdio.h>
#include <string.h>
#include <unordered_map>
#include <vector>

namespace {

/* Process-wide backend state: one GPU (device 0), one stream. Guarded by mu. */
std::mutex mu;
int reg_state;                 /* 0 untried, 1 registered, -1 unavailable */
char reason[256];              /* "cudaXxx failed: <code name>: <string>" */
char reason_short[128];        /* the CUDA error string alone, for the notice */
cudaStream_t stream;
int sm_count = 1;

/* Caching allocator: blocks are rounded to a size class (powers of two up to 1 MiB, then multiples
 * of 2 MiB), and freed blocks wait on a per-class free list instead of going back to cudaFree, so
 * steady-state training does no cudaMalloc per op. Reuse is safe because all work is on `stream`. */
std::unordered_map<size_t, std::vector<void *>> free_lists;
std::unordered_map<void *, size_t> live;
size_t bytes_live, bytes_peak, bytes_reserved;

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

/* Shared by quantize and amax: stats (+ per-index amax) for src, casting into dst when given. */
fl_status run_quantize(uint8_t *dst, fl_dtype fmt, const fl_tensor *src, const float *scales, int axis,
                       fl_overflow p, fl_cast_stats *stats, float *row_amax_out) {
    size_t n = (size_t)fl_tensor_numel(src), outer = 1, len = 1, inner = n;
    if (axis >= 0) {
        if (axis >= src->ndim)
            return FL_ERR(FL_EINVAL, "quantize on cuda: axis %d out of range for a %d-d tensor", axis, src->ndim);
        split_axis(src, axis, &outer, &len, &inner);
    }
    /* scratch layout: [stats][row amax bits: len][scales: len] */
    size_t bytes = sizeof(fl_cuda_qstats) + (axis >= 0 ? 2 * len * sizeof(float) : 0);
    Scratch s;
    FL_TRY(cuda_alloc(bytes, &s.p));
    fl_cuda_qstats *dstats = (fl_cuda_qstats *)s.p;
    unsigned *drow = (unsigned *)(dstats + 1);
    float *dscales = (float *)(drow + len);
    FL_CUDA_CHECK(cudaMemsetAsync(s.p, 0, sizeof(fl_cuda_qstats) + (axis >= 0 ? len * sizeof(float) : 0), stream),
                  "cudaMemsetAsync");
    const void *x = fl_tensor_data(src);
    if (axis < 0) {
        FL_TRY(cuda_quantize(x, src->dtype, dst, n, fmt, dst ? scales[0] : 1.0f, p, dstats, stream));
    } else {
        if (dst) FL_CUDA_CHECK(cudaMemcpyAsync(dscales, scales, len * sizeof(float), cudaMemcpyHostToDevice, stream),
                               "cudaMemcpyAsync");
        FL_TRY(cuda_quantize_rows(x, src->dtype, dst, outer, len, inner, fmt, dst ? dscales : NULL, p, dstats, drow,
                                  stream));
    }
    fl_cuda_qstats h;
    FL_CUDA_CHECK(cudaMemcpyAsync(&h, dstats, sizeof h, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
    if (row_amax_out && axis >= 0)
        FL_CUDA_CHECK(cudaMemcpyAsync(row_amax_out, drow, len * sizeof(float), cudaMemcpyDeviceToHost, stream),
                      "cudaMemcpyAsync");
    FL_CUDA_CHECK(cudaStreamSynchronize(stream), "cudaStreamSynchronize");   /* also surfaces kernel faults */
    if (stats) {
        unsigned b = h.amax_bits;
        memcpy(&stats->amax, &b, sizeof b);
        stats->underflow = (int64_t)h.underflow;
        stats->saturated = (int64_t)h.saturated;
        stats->nan = (int64_t)h.nan;
    }
    if (row_amax_out && axis < 0) memcpy(row_amax_out, &h.amax_bits, sizeof(float));
    return FL_OK;
}

fl_status cuda_quantize_entry(fl_tensor *dst, const fl_tensor *src, const float *scales, int axis, fl_overflow p) {
    FL_TRY(check_src(src, "quantize"));
    if (dst->dtype != FL_E4M3 && dst->dtype != FL_E5M2)
        return FL_ERR(FL_EINVAL, "quantize on cuda: expected an e4m3 or e5m2 destination, got %s",
                      fl_format(dst->dtype)->name);
    if (dst->device != FL_DEV_CUDA || !fl_tensor_is_contiguous(dst) || fl_tensor_numel(dst) != fl_tensor_numel(src))
        return FL_ERR(FL_EINVAL, "quantize on cuda: expected a contiguous cuda destination of %lld elements",
                      (long long)fl_tensor_numel(src));
    if (axis >= src->ndim)
        return FL_ERR(FL_EINVAL, "quantize on cuda: axis %d out of range for a %d-d tensor", axis, src->ndim);
    size_t nscale = axis < 0 ? 1 : (size_t)src->shape[axis];
    fl_tensor *si = dst->scale_inv;
    if (!si || si->dtype != FL_F32 || si->device != FL_DEV_CUDA || (size_t)fl_tensor_numel(si) != nscale)
        return FL_ERR(FL_EINVAL, "quantize on cuda: expected dst->scale_inv as %zu fp32 value(s) on cuda", nscale);
    FL_TRY(run_quantize((uint8_t *)fl_tensor_data(dst), dst->dtype, src, scales, axis, p, &dst->qstats, NULL));
    /* scale_inv = 1/scale in fp32 on the host, exactly as the CPU path computes it. */
    std::vector<float> inv(nscale);
    for (size_t i = 0; i < nscale; i++) inv[i] = 1.0f / scales[i];
    return cuda_from_host(fl_tensor_data(si), inv.data(), nscale * sizeof(float));
}

fl_status cuda_dequantize_entry(fl_tensor *dst, const fl_tensor *q) {
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

fl_status cuda_amax_entry(const fl_tensor *src, int axis, float *out) {
    FL_TRY(check_src(src, "amax"));
    return run_quantize(NULL, FL_E4M3, src, NULL, axis, FL_SATURATE, NULL, out);
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
    .matmul = fl_cuda_dev_matmul,
    .quantize = cuda_quantize_entry,
    .dequantize = cuda_dequantize_entry,
    .amax = cuda_amax_entry,
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

/* Make device 0 current, create the stream, and check our kernels have an image for this GPU. */
bool init_locked(void) {
    cudaError_t e;
    const char *what = "cudaSetDevice";
    cudaFuncAttributes fa;
    if ((e = cudaSetDevice(0)) != cudaSuccess) goto fail;
    what = "cudaFree(0) (context creation)";
    if ((e = cudaFree(0)) != cudaSuccess) goto fail;
    what = "cudaFuncGetAttributes (fp8lab is built for sm_89 and sm_90a)";
    if ((e = cudaFuncGetAttributes(&fa, probe_kernel)) != cudaSuccess) goto fail;
    what = "cudaDeviceGetAttribute";
    if ((e = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0)) != cudaSuccess) goto fail;
    what = "cudaStreamCreateWithFlags";
    if ((e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess) goto fail;
    return true;
fail:
    (void)cudaGetLastError();
    snprintf(reason, sizeof reason, "%s failed: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
    snprintf(reason_short, sizeof reason_short, "%s", cudaGetErrorString(e));
    return false;
}

/* Probe and bring up the device once per process, quietly; the outcome sticks. */
int ensure_locked(void) {
    if (reg_state == 0) reg_state = probe_locked() > 0 && init_locked() ? 1 : -1;
    return reg_state;
}

bool notice_printed;

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
        return FL_OK;
    }
    if (print) {    /* once per process, and only when someone asked for the GPU */
        fprintf(stderr, "fp8lab: CUDA built in but no GPU available (%s)\n", reason_short);
        fflush(stderr);
    }
    return FL_ERR(FL_EDEVICE, "no CUDA GPU available: %s", reason);
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
extern "C" void fl_cuda_reset_peak_memory(void) { std::lock_guard<std::mutex> g(mu); bytes_peak = bytes_live; }
extern "C" size_t fl_cuda_memory_reserved(void) { std::lock_guard<std::mutex> g(mu); return bytes_reserved; }
extern "C" void fl_cuda_empty_cache(void) {
    std::lock_guard<std::mutex> g(mu);
    if (reg_state > 0) empty_cache_locked();
}
