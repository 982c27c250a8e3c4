/* softmax.cu — softmax and log-softmax over the last dim (forward and backward), fused cross-entropy
 * (forward loss and backward gradient) and mean-squared error, as the "cuda" device entries
 * (core/device.h); core/cpu/cpu_nn_softmax.c and core/nn.c's MSE are the reference, mirrored operation
 * by operation (the CPU's fl_nn_expf is ported bit for bit, every fp32/fp64 operation separately rounded).
 * Maths, per row of [rows, cols] row-major fp32, m = max_j x_j:
 *   softmax y_j = e^(x_j−m) · (1/Σ_k e^(x_k−m))  (fp32 sum);  bwd dx_j = y_j·(dy_j − Σ_k y_k·dy_k)
 *   log-softmax y_j = (x_j − m) − (float)log Σ_k e^(x_k−m)  (fp64 sum);  bwd dx_j = dy_j − e^(y_j)·Σ_k dy_k
 *   cross-entropy (targets: class ids stored as floats; ignore_index rows count for nothing; smoothing ε):
 *     row loss = (m + log Σ e^(x−m)) − (1−ε)·x_t − (ε/C)·Σ_j x_j  in fp64; loss = Σ rows (fixed order) / count;
 *     dlogits_j = g·(softmax_j − ε/C) − [j = t]·g·(1−ε), g = dloss/count, zero rows where ignored.
 *   MSE: Σ (x−y)² in fp64 (fixed-order two-stage reduction);  bwd dx = f·(x − y).
 * Launch shape: one warp per row (8 rows per 256-thread block) for cols ≤ 1024, else one 512-thread block
 * per row; grid-stride over rows; reductions are xor-butterflies inside warps then a sequential pass over
 * the warps' values, so every result is the same run to run. A bad target is found as the minimum bad row
 * (atomicMin: order-free) and reported with the CPU's message.
 * Tolerance against the CPU (tests/c/test_gpu_nn.c): the per-element operations and the maxima are
 * bit-exact; only sums are in another order: fp32 sums within 4u(√cols + 8) of their Σ|terms|, fp64 sums
 * to ~1e-12 relative. MSE backward is bit-exact. */
#include "rows.cuh"
#include "fl_cuda_host.h"
#include "cuda_entries.h"

namespace {

constexpr int kSumThreads = 256;



/* ---- per-element and per-row maths (host and device) ----------------------------------------------- */

/* The CPU's running max: a NaN element never wins. */
FL_HD float max_step(float m, float x) { return x > m ? x : m; }

FL_HD float softmax_elem(float x, float m, float inv) { return fl_fmul(fl_cu_expf(fl_fsub(x, m)), inv); }
FL_HD float log_softmax_elem(float x, float m, float ls) { return fl_fsub(fl_fsub(x, m), ls); }
/* the fp32 term summed by softmax_bwd / log_softmax_bwd */
FL_HD float softmax_bwd_term(bool log, float y, float dy) { return log ? dy : fl_fmul(y, dy); }
FL_HD float softmax_bwd_elem(bool log, float y, float dy, float s) {
    return log ? fl_fsub(dy, fl_fmul(fl_cu_expf(y), s)) : fl_fmul(y, fl_fsub(dy, s));
}

/* 0: ignored, 1: a valid class id, 2: out of range or not an integer (ce_check_targets of the CPU). */
FL_HD int ce_target_state(float tf, int64_t cols, int64_t ignore_index) {
    double t = tf;
    if (t == (double)ignore_index) return 0;
    if (!(t >= 0.0 && t < (double)cols) || t != floor(t)) return 2;
    return 1;
}

/* lse − (1−ε)·x_t − (ε/C)·Σx, lse = m + log Σ e^(x−m) */
FL_HD double ce_row_loss(float m, double sumexp, float xt, double eps, int64_t cols, double sx) {
    double lse = fl_dadd((double)m, log(sumexp));
    double l = fl_dsub(lse, fl_dmul(fl_dsub(1.0, eps), (double)xt));
    if (eps != 0.0) l = fl_dsub(l, fl_dmul(fl_ddiv(eps, (double)cols), sx));
    return l;
}

/* g·(e·inv − off), minus g·on at the target */
FL_HD float ce_grad_elem(float x, float m, float inv, float g, float off, float on, bool is_target) {
    float v = fl_fmul(g, fl_fsub(fl_fmul(fl_cu_expf(fl_fsub(x, m)), inv), off));
    return is_target ? fl_fsub(v, fl_fmul(g, on)) : v;
}

/* The host scalars of fl_cpu_cross_entropy_bwd. */
struct CeGrad {
    float g, off, on;
};
CeGrad ce_grad_scalars(int64_t cnt, int64_t cols, float label_smoothing, float dloss) {
    CeGrad c;
    c.g = cnt ? (float)((double)dloss / (double)cnt) : 0.0f;
    c.off = label_smoothing / (float)cols;
    c.on = 1.0f - label_smoothing;
    return c;
}

FL_HD double sq_diff(float x, float y) {
    double d = fl_dsub((double)x, (double)y);
    return fl_dmul(d, d);
}

template <int W>
__device__ __forceinline__ float row_max(const float *xr, int64_t cols) {
    float m = -INFINITY;
    for (int64_t j = Rows<W>::lane(); j < cols; j += W) m = max_step(m, xr[j]);
    return group_reduce<W>(m, MaxF());
}

/* Σ e^(x−m) in fp64 */
template <int W>
__device__ __forceinline__ double row_sumexp_d(const float *xr, int64_t cols, float m) {
    double s = 0.0;
    for (int64_t j = Rows<W>::lane(); j < cols; j += W) s = fl_dadd(s, (double)fl_cu_expf(fl_fsub(xr[j], m)));
    return group_reduce<W>(s, AddD());
}

/* Σ e^(x−m) in fp32 */
template <int W>
__device__ __forceinline__ float row_sumexp_f(const float *xr, int64_t cols, float m) {
    float s = 0.0f;
    for (int64_t j = Rows<W>::lane(); j < cols; j += W) s = fl_fadd(s, fl_cu_expf(fl_fsub(xr[j], m)));
    return group_reduce<W>(s, AddF());
}

/* ---- kernels ------------------------------------------------------------------------------------------ */

template <int W, bool LOG>
__global__ void __launch_bounds__(Rows<W>::kBlock) softmax_fwd_kernel(const float *x, float *y, int64_t rows,
                                                                       int64_t cols) {
    const int lane = Rows<W>::lane();
    for (int64_t r = Rows<W>::first(); r < rows; r += Rows<W>::step()) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = row_max<W>(xr, cols);
        if (LOG) {
            float ls = (float)log(row_sumexp_d<W>(xr, cols, m));
            for (int64_t j = lane; j < cols; j += W) yr[j] = log_softmax_elem(xr[j], m, ls);
        } else {
            float inv = fl_fdiv(1.0f, row_sumexp_f<W>(xr, cols, m));
            for (int64_t j = lane; j < cols; j += W) yr[j] = softmax_elem(xr[j], m, inv);
        }
    }
}

template <int W, bool LOG>
__global__ void __launch_bounds__(Rows<W>::kBlock) softmax_bwd_kernel(const float *y, const float *dy, float *dx,
                                                                       int64_t rows, int64_t cols) {
    const int lane = Rows<W>::lane();
    for (int64_t r = Rows<W>::first(); r < rows; r += Rows<W>::step()) {
        const float *yr = y + r * cols, *gr = dy + r * cols;
        float *dr = dx + r * cols;
        float s = 0.0f;
        for (int64_t j = lane; j < cols; j += W) s = fl_fadd(s, softmax_bwd_term(LOG, yr[j], gr[j]));
        s = group_reduce<W>(s, AddF());
        for (int64_t j = lane; j < cols; j += W) dr[j] = softmax_bwd_elem(LOG, yr[j], gr[j], s);
    }
}

/* flags[0]: the smallest bad row (ULLONG_MAX: none), flags[1]: the count of valid (non-ignored) rows. */
__global__ void __launch_bounds__(kSumThreads) ce_check_kernel(const float *target, int64_t rows, int64_t cols,
                                                               int64_t ignore_index, unsigned long long *flags) {
    unsigned long long c = 0;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
        int s = ce_target_state(target[r], cols, ignore_index);
        if (s == 1) c++;
        else if (s == 2) atomicMin(&flags[0], (unsigned long long)r);
    }
    for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);
    if ((threadIdx.x & 31) == 0 && c) atomicAdd(&flags[1], c);   /* integer sums: order-free */
}

/* buf[r] = row r's loss (0 for ignored and bad rows: the check reports those). */
template <int W>
__global__ void __launch_bounds__(Rows<W>::kBlock) ce_fwd_kernel(const float *logits, const float *target,
                                                                  int64_t rows, int64_t cols, int64_t ignore_index,
                                                                  double eps, double *buf) {
    const int lane = Rows<W>::lane();
    for (int64_t r = Rows<W>::first(); r < rows; r += Rows<W>::step()) {
        const float tf = target[r];
        if (ce_target_state(tf, cols, ignore_index) != 1) {   /* uniform in the group */
            if (lane == 0) buf[r] = 0.0;
            continue;
        }
        const float *xr = logits + r * cols;
        float m = row_max<W>(xr, cols);
        double se = row_sumexp_d<W>(xr, cols, m), sx = 0.0;
        if (eps != 0.0) {
            for (int64_t j = lane; j < cols; j += W) sx = fl_dadd(sx, (double)xr[j]);
            sx = group_reduce<W>(sx, AddD());
        }
        if (lane == 0) buf[r] = ce_row_loss(m, se, xr[(int64_t)tf], eps, cols, sx);
    }
}

template <int W>
__global__ void __launch_bounds__(Rows<W>::kBlock) ce_bwd_kernel(const float *logits, const float *target,
                                                                  int64_t rows, int64_t cols, int64_t ignore_index,
                                                                  CeGrad c, float *dlogits) {
    const int lane = Rows<W>::lane();
    for (int64_t r = Rows<W>::first(); r < rows; r += Rows<W>::step()) {
        const float tf = target[r];
        float *dr = dlogits + r * cols;
        if (ce_target_state(tf, cols, ignore_index) != 1) {
            for (int64_t j = lane; j < cols; j += W) dr[j] = 0.0f;
            continue;
        }
        const float *xr = logits + r * cols;
        float m = row_max<W>(xr, cols);
        float inv = fl_fdiv(1.0f, row_sumexp_f<W>(xr, cols, m));
        const int64_t t = (int64_t)tf;
        for (int64_t j = lane; j < cols; j += W) dr[j] = ce_grad_elem(xr[j], m, inv, c.g, c.off, c.on, j == t);
    }
}

/* One block: out[0] = Σ a[i] — per-thread strided sums, then the fixed tree. */
__global__ void __launch_bounds__(kSumThreads) sum_f64_kernel(const double *a, int64_t n, double *out) {
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += kSumThreads) s = fl_dadd(s, a[i]);
    s = group_reduce<kSumThreads>(s, AddD());
    if (threadIdx.x == 0) out[0] = s;
}

/* partial[blockIdx.x] = this block's Σ (x−y)² (grid size fixed by n alone). */
__global__ void __launch_bounds__(kSumThreads) mse_partial_kernel(const float *x, const float *y, int64_t n,
                                                                  double *partial) {
    double s = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * kSumThreads + threadIdx.x; i < n; i += (int64_t)gridDim.x * kSumThreads)
        s = fl_dadd(s, sq_diff(x[i], y[i]));
    s = group_reduce<kSumThreads>(s, AddD());
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void __launch_bounds__(kSumThreads) mse_bwd_kernel(const float *x, const float *y, float *dx, int64_t n,
                                                              float f) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dx[i] = fl_fmul(f, fl_fsub(x[i], y[i]));
}

/* ---- launch helpers ------------------------------------------------------------------------------------- */

fl_status check_shape(const char *fn, int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0)
        return FL_ERR(FL_EINVAL, "%s on cuda: negative shape [%lld, %lld]", fn, (long long)rows, (long long)cols);
    return FL_OK;
}

/* Launch KERNEL<32 or kRowBlock, ...> on the stream with the row grid. */
#define FL_ROWS_LAUNCH(KERNEL, TARGS, ...)                                                                  \
    do {                                                                                                   \
        if (cols <= kWarpMaxCols) KERNEL<32 TARGS><<<rows_grid<32>(rows), kWarpRowsBlock, 0, st>>>(__VA_ARGS__); \
        else KERNEL<kRowBlock TARGS><<<rows_grid<kRowBlock>(rows), kRowBlock, 0, st>>>(__VA_ARGS__);        \
        FL_CUDA_CHECK(cudaGetLastError(), #KERNEL " launch");                                               \
    } while (0)
#define FL_COMMA ,

/* The CPU's message for the first bad target row (on_device: its value read back from the GPU first). */
fl_status bad_target(double value, int64_t row, int64_t cols) {
    if (value >= 0.0 && value < (double)cols && value != floor(value))   /* the CPU's message */
        return FL_ERR(FL_EINVAL, "cross_entropy: target %g at row %lld is not a whole number (class indices are "
                      "integers)", value, (long long)row);
    return FL_ERR(FL_EINVAL, "cross_entropy: target %g at row %lld is out of range [0, %lld)", value, (long long)row,
                  (long long)cols);
}
fl_status bad_target_on_device(const float *target, int64_t row, int64_t cols, cudaStream_t st) {
    float tf;
    FL_CUDA_CHECK(cudaMemcpyAsync(&tf, target + row, sizeof tf, cudaMemcpyDeviceToHost, st), "cudaMemcpyAsync");
    FL_CUDA_CHECK(cudaStreamSynchronize(st), "cudaStreamSynchronize");
    return bad_target((double)tf, row, cols);
}

/* The target check of both cross-entropy directions: count of valid rows, or FL_EINVAL naming the first
 * bad row exactly as the CPU does. flags: 2 device words; synchronizes. */
fl_status ce_check(const float *target, int64_t rows, int64_t cols, int64_t ignore_index, unsigned long long *flags,
                   int64_t *count, cudaStream_t st) {
    FL_CUDA_CHECK(cudaMemsetAsync(flags, 0xff, sizeof(unsigned long long), st), "cudaMemsetAsync");
    FL_CUDA_CHECK(cudaMemsetAsync(flags + 1, 0, sizeof(unsigned long long), st), "cudaMemsetAsync");
    ce_check_kernel<<<grid_for_work((size_t)rows, kSumThreads, 4), kSumThreads, 0, st>>>(target, rows, cols,
                                                                                       ignore_index, flags);
    FL_CUDA_CHECK(cudaGetLastError(), "ce_check_kernel launch");
    unsigned long long h[2];
    FL_CUDA_CHECK(cudaMemcpyAsync(h, flags, sizeof h, cudaMemcpyDeviceToHost, st), "cudaMemcpyAsync");
    FL_CUDA_CHECK(cudaStreamSynchronize(st), "cudaStreamSynchronize");
    if (h[0] != ~0ull) return bad_target_on_device(target, (int64_t)h[0], cols, st);
    *count = (int64_t)h[1];
    return FL_OK;
}

}  // namespace

/* ---- entries ----------------------------------------------------------------------------------------------- */

extern "C" fl_status fl_cuda_dev_softmax_fwd(bool log, const float *x, float *y, int64_t rows, int64_t cols) {
    FL_TRY(check_shape("softmax_fwd", rows, cols));
    if (rows == 0 || cols == 0) return FL_OK;
    if (!x || !y) return FL_ERR(FL_EINVAL, "softmax_fwd on cuda: a NULL buffer");
    cudaStream_t st = fl_cuda_stream();
    if (log) FL_ROWS_LAUNCH(softmax_fwd_kernel, FL_COMMA true, x, y, rows, cols);
    else FL_ROWS_LAUNCH(softmax_fwd_kernel, FL_COMMA false, x, y, rows, cols);
    return FL_OK;
}

extern "C" fl_status fl_cuda_dev_softmax_bwd(bool log, const float *y, const float *dy, float *dx, int64_t rows,
                                             int64_t cols) {
    FL_TRY(check_shape("softmax_bwd", rows, cols));
    if (rows == 0 || cols == 0) return FL_OK;
    if (!y || !dy || !dx) return FL_ERR(FL_EINVAL, "softmax_bwd on cuda: a NULL buffer");
    cudaStream_t st = fl_cuda_stream();
    if (log) FL_ROWS_LAUNCH(softmax_bwd_kernel, FL_COMMA true, y, dy, dx, rows, cols);
    else FL_ROWS_LAUNCH(softmax_bwd_kernel, FL_COMMA false, y, dy, dx, rows, cols);
    return FL_OK;
}

extern "C" fl_status fl_cuda_dev_cross_entropy_fwd(const float *logits, const float *target, int64_t rows,
                                                   int64_t cols, int64_t ignore_index, float label_smoothing,
                                                   double *loss, int64_t *count) {
    FL_TRY(check_shape("cross_entropy_fwd", rows, cols));
    if (!loss) return FL_ERR(FL_EINVAL, "cross_entropy_fwd on cuda: no place for the loss");
    if (rows > 0 && (!logits || !target)) return FL_ERR(FL_EINVAL, "cross_entropy_fwd on cuda: a NULL buffer");
    if (rows == 0) {   /* no rows: 0/0, as the CPU */
        *loss = NAN;
        if (count) *count = 0;
        return FL_OK;
    }
    cudaStream_t st = fl_cuda_stream();
    /* scratch: [flags: 2 words][total][row losses: rows] */
    fl_cu_scratch s;
    FL_TRY(s.alloc((3 + (size_t)rows) * sizeof(double)));
    unsigned long long *flags = (unsigned long long *)s.p;
    double *total = (double *)s.p + 2, *buf = total + 1;
    FL_CUDA_CHECK(cudaMemsetAsync(flags, 0xff, sizeof(unsigned long long), st), "cudaMemsetAsync");
    FL_CUDA_CHECK(cudaMemsetAsync(flags + 1, 0, sizeof(unsigned long long), st), "cudaMemsetAsync");
    ce_check_kernel<<<grid_for_work((size_t)rows, kSumThreads, 4), kSumThreads, 0, st>>>(target, rows, cols,
                                                                                       ignore_index, flags);
    FL_CUDA_CHECK(cudaGetLastError(), "ce_check_kernel launch");
    const double eps = label_smoothing;
    FL_ROWS_LAUNCH(ce_fwd_kernel, , logits, target, rows, cols, ignore_index, eps, buf);
    sum_f64_kernel<<<1, kSumThreads, 0, st>>>(buf, rows, total);
    FL_CUDA_CHECK(cudaGetLastError(), "sum_f64_kernel launch");
    unsigned long long h[3];
    FL_CUDA_CHECK(cudaMemcpyAsync(h, s.p, sizeof h, cudaMemcpyDeviceToHost, st), "cudaMemcpyAsync");
    FL_CUDA_CHECK(cudaStreamSynchronize(st), "cudaStreamSynchronize");
    if (h[0] != ~0ull) return bad_target_on_device(target, (int64_t)h[0], cols, st);
    double tot;
    memcpy(&tot, &h[2], sizeof tot);
    const int64_t cnt = (int64_t)h[1];
    *loss = cnt ? tot / (double)cnt : NAN;
    if (count) *count = cnt;
    return FL_OK;
}

extern "C" fl_status fl_cuda_dev_cross_entropy_bwd(const float *logits, const float *target, int64_t rows,
                                                   int64_t cols, int64_t ignore_index, float label_smoothing,
                                                   float dloss, float *dlogits) {
    FL_TRY(check_shape("cross_entropy_bwd", rows, cols));
    if (rows == 0) return FL_OK;
    if (!logits || !target || !dlogits) return FL_ERR(FL_EINVAL, "cross_entropy_bwd on cuda: a NULL buffer");
    cudaStream_t st = fl_cuda_stream();
    fl_cu_scratch s;
    FL_TRY(s.alloc(2 * sizeof(unsigned long long)));
    int64_t cnt = 0;
    FL_TRY(ce_check(target, rows, cols, ignore_index, (unsigned long long *)s.p, &cnt, st));
    if (cols == 0) return FL_OK;   /* every row ignored (a kept row would have failed the check) */
    CeGrad c = ce_grad_scalars(cnt, cols, label_smoothing, dloss);
    FL_ROWS_LAUNCH(ce_bwd_kernel, , logits, target, rows, cols, ignore_index, c, dlogits);
    return FL_OK;
}

extern "C" fl_status fl_cuda_dev_mse_fwd(const float *x, const float *y, int64_t n, double *sum) {
    if (n < 0) return FL_ERR(FL_EINVAL, "mse_fwd on cuda: negative element count %lld", (long long)n);
    if (!sum) return FL_ERR(FL_EINVAL, "mse_fwd on cuda: no place for the sum");
    if (n == 0) { *sum = 0.0; return FL_OK; }
    if (!x || !y) return FL_ERR(FL_EINVAL, "mse_fwd on cuda: a NULL buffer");
    cudaStream_t st = fl_cuda_stream();
    /* A grid fixed by n alone (not by the GPU), so the order of the sum is too. */
    int64_t blocks = (n + kSumThreads - 1) / kSumThreads;
    if (blocks > 1024) blocks = 1024;
    fl_cu_scratch s;
    FL_TRY(s.alloc((1 + (size_t)blocks) * sizeof(double)));
    double *out = (double *)s.p, *partial = out + 1;
    mse_partial_kernel<<<(unsigned)blocks, kSumThreads, 0, st>>>(x, y, n, partial);
    FL_CUDA_CHECK(cudaGetLastError(), "mse_partial_kernel launch");
    sum_f64_kernel<<<1, kSumThreads, 0, st>>>(partial, blocks, out);
    FL_CUDA_CHECK(cudaGetLastError(), "sum_f64_kernel launch");
    double h;
    FL_CUDA_CHECK(cudaMemcpyAsync(&h, out, sizeof h, cudaMemcpyDeviceToHost, st), "cudaMemcpyAsync");
    FL_CUDA_CHECK(cudaStreamSynchronize(st), "cudaStreamSynchronize");
    *sum = h;
    return FL_OK;
}

extern "C" fl_status fl_cuda_dev_mse_bwd(const float *x, const float *y, float *dx, int64_t n, float f) {
    if (n < 0) return FL_ERR(FL_EINVAL, "mse_bwd on cuda: negative element count %lld", (long long)n);
    if (n == 0) return FL_OK;
    if (!x || !y || !dx) return FL_ERR(FL_EINVAL, "mse_bwd on cuda: a NULL buffer");
    mse_bwd_kernel<<<grid_for_work((size_t)n, kSumThreads, 8), kSumThreads, 0, fl_cuda_stream()>>>(x, y, dx, n, f);
    FL_CUDA_CHECK(cudaGetLastError(), "mse_bwd_kernel launch");
    return FL_OK;
}

/* ---- the same row maths on the host, sums in index order (tests/c/test_gpu_nn.c) ---------------------------- */

extern "C" void fl_cuda_nn_softmax_fwd_host(bool log, const float *x, float *y, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols, m = -INFINITY;
        for (int64_t j = 0; j < cols; j++) m = max_step(m, xr[j]);
        if (log) {
            double s = 0.0;
            for (int64_t j = 0; j < cols; j++) s += (double)fl_cu_expf(xr[j] - m);
            float ls = (float)::log(s);
            for (int64_t j = 0; j < cols; j++) yr[j] = log_softmax_elem(xr[j], m, ls);
        } else {
            float s = 0.0f;
            for (int64_t j = 0; j < cols; j++) s += fl_cu_expf(xr[j] - m);
            float inv = 1.0f / s;
            for (int64_t j = 0; j < cols; j++) yr[j] = softmax_elem(xr[j], m, inv);
        }
    }
}

extern "C" void fl_cuda_nn_softmax_bwd_host(bool log, const float *y, const float *dy, float *dx, int64_t rows,
                                            int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        const float *yr = y + r * cols, *gr = dy + r * cols;
        float *dr = dx + r * cols, s = 0.0f;
        for (int64_t j = 0; j < cols; j++) s += softmax_bwd_term(log, yr[j], gr[j]);
        for (int64_t j = 0; j < cols; j++) dr[j] = softmax_bwd_elem(log, yr[j], gr[j], s);
    }
}

static fl_status ce_check_host(const float *target, int64_t rows, int64_t cols, int64_t ignore_index, int64_t *count) {
    int64_t c = 0;
    for (int64_t r = 0; r < rows; r++) {
        int s = ce_target_state(target[r], cols, ignore_index);
        if (s == 2) return bad_target((double)target[r], r, cols);
        c += s;
    }
    *count = c;
    return FL_OK;
}

extern "C" fl_status fl_cuda_nn_cross_entropy_fwd_host(const float *logits, const float *target, int64_t rows,
                                                       int64_t cols, int64_t ignore_index, float label_smoothing,
                                                       double *loss, int64_t *count) {
    int64_t cnt = 0;
    FL_TRY(ce_check_host(target, rows, cols, ignore_index, &cnt));
    const double eps = label_smoothing;
    double total = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        if (ce_target_state(target[r], cols, ignore_index) != 1) continue;
        const float *xr = logits + r * cols;
        float m = -INFINITY;
        for (int64_t j = 0; j < cols; j++) m = max_step(m, xr[j]);
        double se = 0.0, sx = 0.0;
        for (int64_t j = 0; j < cols; j++) se += (double)fl_cu_expf(xr[j] - m);
        if (eps != 0.0) for (int64_t j = 0; j < cols; j++) sx += (double)xr[j];
        total += ce_row_loss(m, se, xr[(int64_t)target[r]], eps, cols, sx);
    }
    *loss = cnt ? total / (double)cnt : NAN;
    if (count) *count = cnt;
    return FL_OK;
}

extern "C" fl_status fl_cuda_nn_cross_entropy_bwd_host(const float *logits, const float *target, int64_t rows,
                                                       int64_t cols, int64_t ignore_index, float label_smoothing,
                                                       float dloss, float *dlogits) {
    int64_t cnt = 0;
    FL_TRY(ce_check_host(target, rows, cols, ignore_index, &cnt));
    CeGrad c = ce_grad_scalars(cnt, cols, label_smoothing, dloss);
    for (int64_t r = 0; r < rows; r++) {
        float *dr = dlogits + r * cols;
        if (ce_target_state(target[r], cols, ignore_index) != 1) {
            for (int64_t j = 0; j < cols; j++) dr[j] = 0.0f;
            continue;
        }
        const float *xr = logits + r * cols;
        float m = -INFINITY, s = 0.0f;
        for (int64_t j = 0; j < cols; j++) m = max_step(m, xr[j]);
        for (int64_t j = 0; j < cols; j++) s += fl_cu_expf(xr[j] - m);
        float inv = 1.0f / s;
        const int64_t t = (int64_t)target[r];
        for (int64_t j = 0; j < cols; j++) dr[j] = ce_grad_elem(xr[j], m, inv, c.g, c.off, c.on, j == t);
    }
    return FL_OK;
}

extern "C" double fl_cuda_nn_mse_sum_host(const float *x, const float *y, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += sq_diff(x[i], y[i]);
    return s;
}
