/* layernorm.cu — LayerNorm over the last dim, forward and backward, as the "cuda" device entries
 * (core/device.h); core/cpu/cpu_nn_norm.c is the reference, mirrored operation by operation.
 * Maths, per row of [rows, cols] row-major fp32 (w, b [cols], either may be NULL):
 *   forward: mean = Σx/n and var = Σ(x − mean)²/n in fp64 (two passes, no cancellation),
 *            mean_f = (float)mean, rstd = (float)(1/√(var + eps)), y = ((x − mean_f)·rstd)·w + b in fp32;
 *   backward, x̂ = (x − mean)·rstd, g = dy·w: a = Σg/n, c = Σ(g·(x − mean))·rstd/n (fp32),
 *            dx = rstd·((g − a) − x̂·c);  dw += Σ_rows (dy·(x − mean))·rstd,  db += Σ_rows dy.
 * Launch shape: one warp per row (8 rows per 256-thread block) for cols ≤ 1024, else one 512-thread block
 * per row, grid-stride over rows. dw/db: two deterministic stages, never atomics: (1) a [cols/32, chunks]
 * grid of 32×8 blocks, each column's rows split into ≤ 256 chunks of ≥ 64 rows fixed by the shape alone,
 * each thread summing every 8th row of its chunk in row order, the 8 sums combined in order → one partial
 * per (chunk, column) in scratch; (2) per column, the partials summed in chunk order and added to dw/db.
 * Tolerance against the CPU (tests/c/test_gpu_nn.c): the per-element operations are the CPU's, mean and
 * rstd round fp64 values computed in another order (equal but for a rare last-bit tie), fp32 sums within
 * 4u(√n + 8) of their Σ|terms| (the CPU's dw/db sums run over rows sequentially, ours in chunks). */
#include "rows.cuh"
#include "fl_cuda_host.h"
#include "cuda_entries.h"

namespace {

constexpr int kColTile = 32, kRowLanes = 8;   /* parameter-gradient blocks: 32 columns × 8 row lanes */
constexpr int64_t kMinChunkRows = 64, kMaxChunks = 256;


/* ---- per-element and per-row maths (host and device) ------------------------------------------------- */

FL_HD double sq_dev(float x, double mu) {
    double d = fl_dsub((double)x, mu);
    return fl_dmul(d, d);
}
/* mean and rstd from the fp64 sums, as the CPU rounds them */
FL_HD void ln_stats(double s, double v, int64_t cols, float eps, float *m, float *rs) {
    *m = (float)fl_ddiv(s, (double)cols);
    *rs = (float)fl_ddiv(1.0, fl_dsqrt(fl_dadd(fl_ddiv(v, (double)cols), (double)eps)));
}
FL_HD float ln_out(float x, float m, float rs, const float *w, const float *b, int64_t j) {
    float t = fl_fmul(fl_fsub(x, m), rs);
    if (w) t = fl_fmul(t, w[j]);
    if (b) t = fl_fadd(t, b[j]);
    return t;
}
FL_HD float ln_g(float dy, const float *w, int64_t j) { return w ? fl_fmul(dy, w[j]) : dy; }
/* (g·(x − m))·rs: the row sum term of dx, and (with g = dy) the dw term */
FL_HD float ln_gx(float g, float x, float m, float rs) { return fl_fmul(fl_fmul(g, fl_fsub(x, m)), rs); }
FL_HD float ln_dx(float g, float x, float m, float rs, float a, float c) {
    return fl_fmul(rs, fl_fsub(fl_fsub(g, a), fl_fmul(fl_fmul(fl_fsub(x, m), rs), c)));
}

/* ---- kernels ------------------------------------------------------------------------------------------ */

template <int W>
__global__ void __launch_bounds__(Rows<W>::kBlock) ln_fwd_kernel(const float *x, const float *w, const float *b,
                                                                  float *y, float *mean, float *rstd, int64_t rows,
                                                                  int64_t cols, float eps) {
    const int lane = Rows<W>::lane();
    for (int64_t r = Rows<W>::first(); r < rows; r += Rows<W>::step()) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        double s = 0.0;
        for (int64_t j = lane; j < cols; j += W) s = fl_dadd(s, (double)xr[j]);
        s = group_reduce<W>(s, AddD());
        const double mu = fl_ddiv(s, (double)cols);
        double v = 0.0;
        for (int64_t j = lane; j < cols; j += W) v = fl_dadd(v, sq_dev(xr[j], mu));
        v = group_reduce<W>(v, AddD());
        float m, rs;
        ln_stats(s, v, cols, eps, &m, &rs);
        if (lane == 0) { mean[r] = m; rstd[r] = rs; }
        for (int64_t j = lane; j < cols; j += W) yr[j] = ln_out(xr[j], m, rs, w, b, j);
    }
}

template <int W>
__global__ void __launch_bounds__(Rows<W>::kBlock) ln_bwd_dx_kernel(const float *x, const float *w,
                                                                     const float *mean, const float *rstd,
                                                                     const float *dy, float *dx, int64_t rows,
                                                                     int64_t cols) {
    const int lane = Rows<W>::lane();
    for (int64_t r = Rows<W>::first(); r < rows; r += Rows<W>::step()) {
        const float *xr = x + r * cols, *gr = dy + r * cols;
        float *dr = dx + r * cols;
        const float m = mean[r], rs = rstd[r];
        float sg = 0.0f, sgx = 0.0f;
        for (int64_t j = lane; j < cols; j += W) {
            float g = ln_g(gr[j], w, j);
            sg = fl_fadd(sg, g);
            sgx = fl_fadd(sgx, ln_gx(g, xr[j], m, rs));
        }
        sg = group_reduce<W>(sg, AddF());
        sgx = group_reduce<W>(sgx, AddF());
        const float a = fl_fdiv(sg, (float)cols), c = fl_fdiv(sgx, (float)cols);
        for (int64_t j = lane; j < cols; j += W) dr[j] = ln_dx(ln_g(gr[j], w, j), xr[j], m, rs, a, c);
    }
}

/* Stage 1 of dw/db: block (32, 8) covers columns [32·bx, 32·bx + 32) of the rows of chunk by; thread
 * (tx, ty) sums rows r0 + ty, r0 + ty + 8, … in row order; the 8 sums are combined in ty order. */
__global__ void __launch_bounds__(kColTile * kRowLanes) ln_params_partial_kernel(const float *x, const float *dy,
                                                                                const float *mean, const float *rstd,
                                                                                int64_t rows, int64_t cols,
                                                                                int64_t chunk_rows, float *pw,
                                                                                float *pb) {
    __shared__ float shw[kRowLanes][kColTile], shb[kRowLanes][kColTile];
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
    const int64_t j = (int64_t)blockIdx.x * kColTile + tx;
    const int64_t r0 = (int64_t)blockIdx.y * chunk_rows, r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
    float aw = 0.0f, ab = 0.0f;
    if (j < cols) {
        for (int64_t r = r0 + ty; r < r1; r += kRowLanes) {
            const float g = dy[r * cols + j];
            aw = fl_fadd(aw, ln_gx(g, x[r * cols + j], mean[r], rstd[r]));
            ab = fl_fadd(ab, g);
        }
    }
    shw[ty][tx] = aw;
    shb[ty][tx] = ab;
    __syncthreads();
    if (ty == 0 && j < cols) {
        float sw = shw[0][tx], sb = shb[0][tx];
#pragma unroll
        for (int k = 1; k < kRowLanes; k++) { sw = fl_fadd(sw, shw[k][tx]); sb = fl_fadd(sb, shb[k][tx]); }
        const int64_t o = (int64_t)blockIdx.y * cols + j;
        pw[o] = sw;
        pb[o] = sb;
    }
}

/* Stage 2: dw[j] += Σ_chunks pw[c][j] (chunk order), the same for db; chunks may be 0 (rows == 0: the CPU
 * still adds its zero sums). */
__global__ void __launch_bounds__(256) ln_params_final_kernel(const float *pw, const float *pb, int64_t chunks,
                                                              int64_t cols, float *dw, float *db) {
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += (int64_t)gridDim.x * blockDim.x) {
        if (dw) {
            float s = 0.0f;
            for (int64_t c = 0; c < chunks; c++) s = fl_fadd(s, pw[c * cols + j]);
            dw[j] = fl_fadd(dw[j], s);
        }
        if (db) {
            float s = 0.0f;
            for (int64_t c = 0; c < chunks; c++) s = fl_fadd(s, pb[c * cols + j]);
            db[j] = fl_fadd(db[j], s);
        }
    }
}

/* Rows per chunk of the dw/db reduction: a function of the shape alone, so the order of every sum is too. */
int64_t chunk_rows_for(int64_t rows) {
    int64_t c = (rows + kMaxChunks - 1) / kMaxChunks;
    return c > kMinChunkRows ? c : kMinChunkRows;
}

fl_status check_shape(const char *fn, int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0)
        return FL_ERR(FL_EINVAL, "%s on cuda: negative shape [%lld, %lld]", fn, (long long)rows, (long long)cols);
    return FL_OK;
}

}  // namespace

/* ---- entries ----------------------------------------------------------------------------------------------- */

extern "C" fl_status fl_cuda_dev_layernorm_fwd(const float *x, const float *w, const float *b, float *y, float *mean,
                                               float *rstd, int64_t rows, int64_t cols, float eps) {
    FL_TRY(check_shape("layernorm_fwd", rows, cols));
    if (rows == 0) return FL_OK;
    if (!mean || !rstd || (cols > 0 && (!x || !y)))
        return FL_ERR(FL_EINVAL, "layernorm_fwd on cuda: a NULL buffer");
    cudaStream_t st = fl_cuda_stream();
    /* cols == 0 still runs: mean and rstd become 0/0 = NaN, as on the CPU */
    if (cols <= kWarpMaxCols)
        ln_fwd_kernel<32><<<rows_grid<32>(rows), kWarpRowsBlock, 0, st>>>(x, w, b, y, mean, rstd, rows, cols, eps);
    else
        ln_fwd_kernel<kRowBlock><<<rows_grid<kRowBlock>(rows), kRowBlock, 0, st>>>(x, w, b, y, mean, rstd, rows, cols,
                                                                                   eps);
    FL_CUDA_CHECK(cudaGetLastError(), "ln_fwd_kernel launch");
    return FL_OK;
}

extern "C" fl_status fl_cuda_dev_layernorm_bwd(const float *x, const float *w, const float *mean, const float *rstd,
                                               const float *dy, float *dx, float *dw, float *db, int64_t rows,
                                               int64_t cols) {
    FL_TRY(check_shape("layernorm_bwd", rows, cols));
    if (cols == 0) return FL_OK;
    if (rows > 0 && (!x || !mean || !rstd || !dy)) return FL_ERR(FL_EINVAL, "layernorm_bwd on cuda: a NULL buffer");
    const int64_t col_tiles = (cols + kColTile - 1) / kColTile;
    if (col_tiles > 0x7fffffff)
        return FL_ERR(FL_EUNSUPPORTED, "layernorm_bwd on cuda: %lld columns is too many", (long long)cols);
    cudaStream_t st = fl_cuda_stream();
    if (dx && rows > 0) {
        if (cols <= kWarpMaxCols)
            ln_bwd_dx_kernel<32><<<rows_grid<32>(rows), kWarpRowsBlock, 0, st>>>(x, w, mean, rstd, dy, dx, rows, cols);
        else
            ln_bwd_dx_kernel<kRowBlock><<<rows_grid<kRowBlock>(rows), kRowBlock, 0, st>>>(x, w, mean, rstd, dy, dx, rows,
                                                                                          cols);
        FL_CUDA_CHECK(cudaGetLastError(), "ln_bwd_dx_kernel launch");
    }
    if (!dw && !db) return FL_OK;
    const int64_t chunk = chunk_rows_for(rows), chunks = (rows + chunk - 1) / chunk;
    fl_cu_scratch s;
    float *pw = NULL, *pb = NULL;
    if (chunks > 0) {
        FL_TRY(s.alloc(2 * (size_t)chunks * (size_t)cols * sizeof(float)));
        pw = (float *)s.p;
        pb = pw + chunks * cols;
        ln_params_partial_kernel<<<dim3((unsigned)col_tiles, (unsigned)chunks), dim3(kColTile, kRowLanes), 0, st>>>(
            x, dy, mean, rstd, rows, cols, chunk, pw, pb);
        FL_CUDA_CHECK(cudaGetLastError(), "ln_params_partial_kernel launch");
    }
    ln_params_final_kernel<<<grid_for_work((size_t)cols, 256, 8), 256, 0, st>>>(pw, pb, chunks, cols, dw, db);
    FL_CUDA_CHECK(cudaGetLastError(), "ln_params_final_kernel launch");
    return FL_OK;
}

/* ---- the same maths on the host (tests/c/test_gpu_nn.c): row sums in index order; dw/db in exactly the
 * device's chunked order, so a GPU run must match this bit for bit. ------------------------------------------ */

extern "C" void fl_cuda_nn_layernorm_fwd_host(const float *x, const float *w, const float *b, float *y, float *mean,
                                              float *rstd, int64_t rows, int64_t cols, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        double s = 0.0, v = 0.0;
        for (int64_t j = 0; j < cols; j++) s += (double)xr[j];
        const double mu = s / (double)cols;
        for (int64_t j = 0; j < cols; j++) v += sq_dev(xr[j], mu);
        float m, rs;
        ln_stats(s, v, cols, eps, &m, &rs);
        mean[r] = m;
        rstd[r] = rs;
        for (int64_t j = 0; j < cols; j++) y[r * cols + j] = ln_out(xr[j], m, rs, w, b, j);
    }
}

extern "C" void fl_cuda_nn_layernorm_bwd_host(const float *x, const float *w, const float *mean, const float *rstd,
                                              const float *dy, float *dx, float *dw, float *db, int64_t rows,
                                              int64_t cols) {
    for (int64_t r = 0; dx && r < rows; r++) {
        const float *xr = x + r * cols, *gr = dy + r * cols;
        const float m = mean[r], rs = rstd[r];
        float sg = 0.0f, sgx = 0.0f;
        for (int64_t j = 0; j < cols; j++) {
            float g = ln_g(gr[j], w, j);
            sg += g;
            sgx += ln_gx(g, xr[j], m, rs);
        }
        const float a = sg / (float)cols, c = sgx / (float)cols;
        for (int64_t j = 0; j < cols; j++) dx[r * cols + j] = ln_dx(ln_g(gr[j], w, j), xr[j], m, rs, a, c);
    }
    if (!dw && !db) return;
    const int64_t chunk = chunk_rows_for(rows), chunks = (rows + chunk - 1) / chunk;
    for (int64_t j = 0; j < cols; j++) {
        float tw = 0.0f, tb = 0.0f;
        for (int64_t c = 0; c < chunks; c++) {
            const int64_t r0 = c * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
            float lw[kRowLanes], lb[kRowLanes];
            for (int l = 0; l < kRowLanes; l++) {
                lw[l] = lb[l] = 0.0f;
                for (int64_t r = r0 + l; r < r1; r += kRowLanes) {
                    const float g = dy[r * cols + j];
                    lw[l] += ln_gx(g, x[r * cols + j], mean[r], rstd[r]);
                    lb[l] += g;
                }
            }
            float sw = lw[0], sb = lb[0];
            for (int l = 1; l < kRowLanes; l++) { sw += lw[l]; sb += lb[l]; }
            tw += sw;
            tb += sb;
        }
        if (dw) dw[j] += tw;
        if (db) db[j] += tb;
    }
}
