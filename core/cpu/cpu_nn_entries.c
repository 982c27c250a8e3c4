/* cpu_nn_entries.c — the CPU device's NN entries (core/device.h): the kernels of cpu_nn.h behind the
 * device-table signatures, plus the small ones that have no kernel file of their own (MSE, bias add). */
#include "cpu_internal.h"
#include "cpu_nn.h"
#include "cpu_nn_internal.h"
#include "par.h"
#include <omp.h>
#include <stdlib.h>

fl_status fl_cpu_dev_act_fwd(fl_act kind, const float *x, float *y, int64_t n) {
    if (kind == FL_ACT_RELU) fl_cpu_relu_fwd(x, y, n);
    else if (kind == FL_ACT_SILU) fl_cpu_silu_fwd(x, y, n);
    else if (kind == FL_ACT_SIGMOID || kind == FL_ACT_TANH) fl_cpu_sigmoid_tanh_fwd(kind == FL_ACT_TANH, x, y, n);
    else fl_cpu_gelu_fwd(x, y, n, kind == FL_ACT_GELU_TANH);
    return FL_OK;
}
fl_status fl_cpu_dev_act_bwd(fl_act kind, const float *x, const float *dy, float *dx, int64_t n) {
    if (kind == FL_ACT_RELU) fl_cpu_relu_bwd(x, dy, dx, n);
    else if (kind == FL_ACT_SILU) fl_cpu_silu_bwd(x, dy, dx, n);
    else if (kind == FL_ACT_SIGMOID || kind == FL_ACT_TANH) fl_cpu_sigmoid_tanh_bwd(kind == FL_ACT_TANH, x, dy, dx, n);
    else fl_cpu_gelu_bwd(x, dy, dx, n, kind == FL_ACT_GELU_TANH);
    return FL_OK;
}
fl_status fl_cpu_dev_act_fwd_bf16(fl_act kind, const uint16_t *x, float *y, uint16_t *y16, int64_t n) {
    fl_cpu_act_fwd_bf16(kind, x, y, y16, n);
    return FL_OK;
}
fl_status fl_cpu_dev_act_bwd_bf16(fl_act kind, const uint16_t *x, const float *dy, float *dx, int64_t n) {
    if (kind != FL_ACT_GELU && kind != FL_ACT_GELU_TANH && kind != FL_ACT_SILU)
        return FL_ERR(FL_EINVAL, "act_bwd_bf16: kind must be GELU, GELU tanh or SiLU, got %d", (int)kind);
    fl_cpu_act_bwd_bf16(kind, x, dy, dx, n);
    return FL_OK;
}
fl_status fl_cpu_dev_softmax_fwd(bool log, const float *x, float *y, int64_t rows, int64_t cols) {
    if (log) fl_cpu_log_softmax_fwd(x, y, rows, cols); else fl_cpu_softmax_fwd(x, y, rows, cols);
    return FL_OK;
}
fl_status fl_cpu_dev_softmax_fwd_bf16(bool log, const uint16_t *x, float *y, int64_t rows, int64_t cols) {
    if (!fl_cpu_softmax_fwd_bf16(log, x, y, rows, cols))
        return FL_ERR(FL_ENOMEM, "%s: out of memory for a row buffer of %lld floats", log ? "log_softmax" : "softmax",
                      (long long)cols);
    return FL_OK;
}
fl_status fl_cpu_dev_softmax_bwd(bool log, const float *y, const float *dy, float *dx, int64_t rows, int64_t cols) {
    if (log) fl_cpu_log_softmax_bwd(y, dy, dx, rows, cols); else fl_cpu_softmax_bwd(y, dy, dx, rows, cols);
    return FL_OK;
}
fl_status fl_cpu_dev_softmax_dim_fwd(bool log, const float *x, float *y, int64_t outer, int64_t size, int64_t inner) {
    fl_cpu_softmax_dim_fwd(log, x, y, outer, size, inner);
    return FL_OK;
}
fl_status fl_cpu_dev_softmax_dim_bwd(bool log, const float *y, const float *dy, float *dx, int64_t outer, int64_t size,
                                     int64_t inner) {
    fl_cpu_softmax_dim_bwd(log, y, dy, dx, outer, size, inner);
    return FL_OK;
}
/* cpu_nn.h's cross-entropy and embedding kernels already have the entries' signatures. */
fl_status fl_cpu_dev_cross_entropy_fwd(const float *logits, const float *target, int64_t rows, int64_t cols,
                                       int64_t ignore_index, float label_smoothing, double *loss, int64_t *count) {
    return fl_cpu_cross_entropy_fwd(logits, target, rows, cols, ignore_index, label_smoothing, loss, count);
}
fl_status fl_cpu_dev_cross_entropy_bwd(const float *logits, const float *target, int64_t rows, int64_t cols,
                                       int64_t ignore_index, float label_smoothing, float dloss, float *dlogits) {
    return fl_cpu_cross_entropy_bwd(logits, target, rows, cols, ignore_index, label_smoothing, dloss, dlogits);
}
fl_status fl_cpu_dev_embedding_fwd(const float *idx, int64_t n, const float *weight, int64_t vocab, int64_t dim, float *y) {
    return fl_cpu_embedding_fwd(idx, n, weight, vocab, dim, y);
}
fl_status fl_cpu_dev_mse_fwd(const float *x, const float *y, int64_t n, double *sum) {
    /* One sequential double sum: the same bits whatever the thread count. */
    double s = 0;
    for (int64_t k = 0; k < n; k++) { double d = (double)x[k] - (double)y[k]; s += d * d; }
    *sum = s;
    return FL_OK;
}
fl_status fl_cpu_dev_mse_bwd(const float *x, const float *y, float *dx, int64_t n, float f) {
    FL_PAR_FOR_SIMD(n > FL_NN_PAR_MIN,,
    for (int64_t k = 0; k < n; k++) dx[k] = f * (x[k] - y[k]););
    return FL_OK;
}
fl_status fl_cpu_dev_add_layernorm_fwd(const float *x, const float *r, const float *w, const float *b, float *y,
                                       float *mean, float *rstd, int64_t rows, int64_t cols, float eps) {
    /* two rows of the sum per thread (the kernel's scratch) */
    float *s = aligned_alloc(64, ((size_t)omp_get_max_threads() * (size_t)(2 * cols) * sizeof(float) + 63) / 64 * 64);
    if (!s) return FL_ERR(FL_ENOMEM, "layer_norm: out of memory for %d rows of %lld", 2 * omp_get_max_threads(),
                          (long long)cols);
    fl_cpu_add_layernorm_fwd(x, r, w, b, y, mean, rstd, rows, cols, eps, s);
    free(s);
    return FL_OK;
}
fl_status fl_cpu_dev_layernorm_fwd(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd,
                                     int64_t rows, int64_t cols, float eps) {
    fl_cpu_layernorm_fwd(x, w, b, y, mean, rstd, rows, cols, eps);
    return FL_OK;
}
fl_status fl_cpu_dev_layernorm_quantize(fl_tensor *dst, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b,
                                        fl_tensor *mean, fl_tensor *rstd, float eps, const float *scale, int margin,
                                        bool pow2, fl_overflow p) {
    const int64_t cols = x->ndim ? x->shape[x->ndim - 1] : 1, rows = cols ? fl_tensor_numel(x) / cols : 0;
    const fl_tensor *wb[2] = { w, b };
    bool ok = x->dtype == FL_F32 && fl_tensor_is_contiguous(x) && fl_format(dst->dtype)->is_fp8 &&
              fl_shape_equal(x->ndim, x->shape, dst->ndim, dst->shape) && fl_tensor_is_contiguous(dst) &&
              mean->dtype == FL_F32 && rstd->dtype == FL_F32 && fl_tensor_is_contiguous(mean) &&
              fl_tensor_is_contiguous(rstd) && fl_tensor_numel(mean) == rows && fl_tensor_numel(rstd) == rows;
    for (int i = 0; i < 2; i++)
        ok = ok && (!wb[i] || (wb[i]->dtype == FL_F32 && fl_tensor_is_contiguous(wb[i]) && fl_tensor_numel(wb[i]) == cols));
    if (!ok)
        return FL_ERR(FL_EINVAL, "layernorm_quantize: expects a contiguous fp32 x [rows, cols] into FP8 of its shape, fp32 "
                      "[cols] weight and bias or none, and fp32 [rows] mean and rstd");
    fl_cast_stats st;
    float used;
    FL_TRY(fl_cpu_layernorm_quantize(fl_tensor_data(x), w ? fl_tensor_data(w) : NULL, b ? fl_tensor_data(b) : NULL,
                                     fl_tensor_data(dst), fl_tensor_data(mean), fl_tensor_data(rstd), rows, cols, eps,
                                     dst->dtype, scale, margin, pow2, p, &st, &used));
    ((float *)fl_tensor_data(dst->scale_inv))[0] = 1.0f / used;
    dst->qstats = st;
    return fl_check_interrupt();
}
fl_status fl_cpu_dev_layernorm_bwd(const float *x, const float *w, const float *mean, const float *rstd,
                                     const float *dy, float *dx, float *dw, float *db, int64_t rows, int64_t cols) {
    return fl_cpu_layernorm_bwd(x, w, mean, rstd, dy, dx, dw, db, rows, cols);
}
fl_status fl_cpu_dev_layernorm_bwd_add(const float *x, const float *w, const float *mean, const float *rstd,
                                       const float *dy, float *dx, float *dw, float *db, int64_t rows, int64_t cols) {
    return fl_cpu_layernorm_bwd_add(x, w, mean, rstd, dy, dx, dw, db, rows, cols);
}
fl_status fl_cpu_dev_embedding_bwd(const float *idx, int64_t n, const float *dy, int64_t vocab, int64_t dim,
                                     float *dweight) {
    /* The forward checked the indices and the engine refuses a backward after they were written in place
     * (core/autograd.c); checked again here, as the CUDA entry does, so no row outside dweight is written. */
    for (int64_t i = 0; i < n; i++) {
        double t = idx[i];
        if (!(t >= 0.0 && t < (double)vocab && t == (double)(int64_t)t))
            return FL_ERR(FL_EINVAL, "embedding backward: index %g at position %lld is out of range [0, %lld)", t,
                          (long long)i, (long long)vocab);
    }
    fl_cpu_embedding_bwd(idx, n, dy, dim, dweight);
    return FL_OK;
}
fl_status fl_cpu_dev_dropout_fwd(const float *x, float *y, uint8_t *mask, int64_t n, float p, uint64_t seed,
                                   uint64_t offset) {
    fl_cpu_dropout_fwd(x, y, mask, n, p, seed, offset);
    return FL_OK;
}
fl_status fl_cpu_dev_dropout_bwd(const uint8_t *mask, const float *dy, float *dx, int64_t n, float p) {
    fl_cpu_dropout_bwd(mask, dy, dx, n, p);
    return FL_OK;
}
/* att NULL (no backward will read P): fp32 through the per-head kernels keeps each tile's P in the thread's buffer
 * (the same operations on the same values: the same bits as with att), bf16 runs the statistics form (B·H·T·2 floats
 * of a temporary; the same bits as with P), the other paths write P to a temporary. */
fl_status fl_cpu_dev_sdpa_fwd(const float *q, const float *k, const float *v, float *out, float *att, int64_t B, int64_t H,
                          int64_t T, int64_t D, float scale, bool causal, bool bf16) {
    if (!att) {
        const fl_attn_layout l = { 0, T * D, D };   /* contiguous heads, as one batch of B·H (fl_cpu_sdpa_causal_fwd's) */
        if (!bf16 && B * H > 0 && T > 0 && D > 0 && fl_cpu_sdpa_gemm_allowed && fl_cpu_attn_f32_available() &&
            fl_cpu_attn_f32_fwd_at(q, k, v, l, out, l, NULL, 1, B * H, T, D, scale, causal) == FL_OK)
            return FL_OK;
        if (bf16 && B * H > 0 && T > 0 && D > 0 && fl_cpu_sdpa_gemm_allowed && fl_cpu_attn_bf16_stats_available()) {
            float *st = malloc((size_t)(B * H * T * 2) * sizeof(float));
            const fl_attn_layout h = { H * T * D, T * D, D };
            const bool done = st && fl_cpu_attn_bf16_stats_fwd_at(q, k, v, h, out, h, st, B, H, T, D, scale, causal) == FL_OK;
            free(st);
            if (done) return FL_OK;
        }
        if (B * H * T * D == 0) return FL_OK;   /* an empty output: nothing to compute (B·H·T·D is q's numel) */
        float *tmp = malloc((size_t)(B * H * T * T > 0 ? B * H * T * T : 1) * sizeof(float));
        if (!tmp) return FL_ERR(FL_ENOMEM, "attention: out of memory for %lld probabilities", (long long)(B * H * T * T));
        fl_cpu_sdpa_causal_fwd(q, k, v, out, tmp, B, H, T, D, scale, causal, bf16);
        free(tmp);
        return FL_OK;
    }
    fl_cpu_sdpa_causal_fwd(q, k, v, out, att, B, H, T, D, scale, causal, bf16);
    return FL_OK;
}
fl_status fl_cpu_dev_sdpa_bwd(const float *q, const float *k, const float *v, const float *att, const float *dout,
                          float *dq, float *dk, float *dv, int64_t B, int64_t H, int64_t T, int64_t D, float scale,
                          bool causal, bool bf16) {
    fl_cpu_sdpa_causal_bwd(q, k, v, att, dout, dq, dk, dv, B, H, T, D, scale, causal, bf16);
    return FL_OK;
}
/* The packed layouts through the per-head kernels (the only ones that read strided heads), where
 * fl_cpu_sdpa_causal_fwd would run them: bf16 where a bf16 family runs, fp32 where the fp32 one does, the GEMM
 * path allowed; *in: q, k, v (and dq, dk, dv) as parts of [B, T, 3·H·D]; *out: out or dout as [B, T, H·D]. Out
 * of memory for a thread's buffers: not done, so the caller's copies and the other paths take over. */
static bool qkv_direct(bool bf16, int64_t B, int64_t H, int64_t T, int64_t D, fl_attn_layout *in, fl_attn_layout *out) {
    const int64_t C = H * D;
    *in = (fl_attn_layout){ T * 3 * C, D, 3 * C };
    *out = (fl_attn_layout){ T * C, D, C };
    return B > 0 && H > 0 && T > 0 && D > 0 && fl_cpu_sdpa_gemm_allowed &&
           (bf16 ? fl_cpu_attn_bf16_available() : fl_cpu_attn_f32_available());
}
/* With stats (att NULL): the bf16 family's statistics form (fl_cpu_attn_bf16_stats_*), where it runs. */
static bool stats_direct(bool bf16) { return bf16 && fl_cpu_sdpa_gemm_allowed && fl_cpu_attn_bf16_stats_available(); }

fl_status fl_cpu_dev_sdpa_qkv_fwd(const float *qkv, float *out, float *att, float *stats, int64_t B, int64_t H, int64_t T,
                                  int64_t D, float scale, bool causal, bool bf16, bool *done) {
    fl_attn_layout in, ol;
    const int64_t C = H * D;
    /* att and stats NULL (no backward will run): fp32 keeps each tile's P in the thread's buffer, bf16 the statistics
     * in a temporary (fl_cpu_dev_sdpa_fwd's forms without att: the same bits) */
    const bool none = !att && !stats;
    *done = qkv_direct(bf16, B, H, T, D, &in, &ol) && (att || (!bf16 && none) || stats_direct(bf16));
    if (!*done) return FL_OK;
    if (none && !bf16)
        *done = fl_cpu_attn_f32_fwd_at(qkv, qkv + C, qkv + 2 * C, in, out, ol, NULL, B, H, T, D, scale, causal) == FL_OK;
    else if (none) {
        float *st = malloc((size_t)(B * H * T * 2) * sizeof(float));
        *done = st && fl_cpu_attn_bf16_stats_fwd_at(qkv, qkv + C, qkv + 2 * C, in, out, ol, st, B, H, T, D, scale,
                                                    causal) == FL_OK;
        free(st);
    } else if (!att)
        *done = fl_cpu_attn_bf16_stats_fwd_at(qkv, qkv + C, qkv + 2 * C, in, out, ol, stats, B, H, T, D, scale, causal) == FL_OK;
    else
        *done = (bf16 ? fl_cpu_attn_bf16_fwd_at : fl_cpu_attn_f32_fwd_at)(qkv, qkv + C, qkv + 2 * C, in, out, ol, att, B, H,
                                                                           T, D, scale, causal) == FL_OK;
    return FL_OK;
}
fl_status fl_cpu_dev_sdpa_qkv_bwd(const float *qkv, const float *att, const float *stats, const float *dout, float *dqkv,
                                  int64_t B, int64_t H, int64_t T, int64_t D, float scale, bool causal, bool bf16,
                                  bool *done) {
    fl_attn_layout in, ol;
    const int64_t C = H * D;
    *done = qkv_direct(bf16, B, H, T, D, &in, &ol) && (att || stats_direct(bf16));
    if (!*done) return FL_OK;
    fl_attn_bwd_at_fn *bwd = !att ? fl_cpu_attn_bf16_stats_bwd_at : bf16 ? fl_cpu_attn_bf16_bwd_at : fl_cpu_attn_f32_bwd_at;
    *done = bwd(qkv, qkv + C, qkv + 2 * C, in, att ? att : stats, dout, ol, dqkv, dqkv + C, dqkv + 2 * C, in, B, H, T, D,
                scale, causal) == FL_OK;
    return FL_OK;
}
/* The statistics form on contiguous [B, H, T, D] heads (the flash entries' contract; on the CPU the same bits as
 * sdpa_fwd/bwd under bf16). Not done where the bf16 family does not run. */
fl_status fl_cpu_dev_sdpa_flash_fwd(const float *q, const float *k, const float *v, float *out, float *stats, int64_t B,
                                    int64_t H, int64_t T, int64_t D, float scale, bool causal, bool *done) {
    const fl_attn_layout l = { H * T * D, T * D, D };
    *done = B > 0 && H > 0 && T > 0 && D > 0 && stats_direct(true) &&
            fl_cpu_attn_bf16_stats_fwd_at(q, k, v, l, out, l, stats, B, H, T, D, scale, causal) == FL_OK;
    return FL_OK;
}
fl_status fl_cpu_dev_sdpa_flash_bwd(const float *q, const float *k, const float *v, const float *stats, const float *dout,
                                    float *dq, float *dk, float *dv, int64_t B, int64_t H, int64_t T, int64_t D, float scale,
                                    bool causal) {
    const fl_attn_layout l = { H * T * D, T * D, D };
    return fl_cpu_attn_bf16_stats_bwd_at(q, k, v, l, stats, dout, l, dq, dk, dv, l, B, H, T, D, scale, causal);
}
fl_status fl_cpu_dev_bias_add(float *y, const float *b, int64_t rows, int64_t cols) {
    FL_PAR_FOR(rows * cols > (1 << 16),,
    for (int64_t r = 0; r < rows; r++) {
        float *row = y + r * cols;
        FL_PRAGMA(omp simd)
        for (int64_t c = 0; c < cols; c++) row[c] += b[c];
    });
    return FL_OK;
}
fl_status fl_cpu_dev_chnorm_fwd(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd,
                                float *var, int64_t N, int64_t C, int64_t P, int64_t G, float eps) {
    return fl_cpu_chnorm_fwd(x, w, b, y, mean, rstd, var, N, C, P, G, eps);
}
fl_status fl_cpu_dev_chnorm_eval(const float *x, const float *mean, const float *den, const float *w, const float *b,
                                 float *y, int64_t N, int64_t C, int64_t P) {
    fl_cpu_chnorm_eval(x, mean, den, w, b, y, N, C, P);
    return FL_OK;
}
fl_status fl_cpu_dev_chnorm_bwd(const float *x, const float *w, const float *mean, const float *rstd, const float *dy,
                                float *dx, float *dw, float *db, int64_t N, int64_t C, int64_t P, int64_t G) {
    return fl_cpu_chnorm_bwd(x, w, mean, rstd, dy, dx, dw, db, N, C, P, G);
}
fl_status fl_cpu_dev_rms_norm_fwd(const float *x, const float *w, float *y, int64_t rows, int64_t cols, double eps) {
    fl_cpu_rms_norm_fwd(x, w, y, rows, cols, eps);
    return FL_OK;
}
