/* cuda_entries_stub.cu — TEMPORARY during bring-up: weak definitions of the cuda device entries so a
 * build links while their kernel files are written; each real definition overrides its stub. */
#include "fl_cuda.h"
#include "cuda_entries.h"

extern "C" __attribute__((weak)) fl_status fl_cuda_dev_copy(fl_tensor *dst, const fl_tensor *src) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_copy: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_fill(fl_tensor *dst, double value) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_fill: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_binary(fl_binop op, fl_tensor *dst, const fl_tensor *a, const fl_tensor *b) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_binary: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_binary_scalar(fl_binop op, fl_tensor *dst, const fl_tensor *a, double s, bool scalar_first) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_binary_scalar: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_unary(fl_unop op, fl_tensor *dst, const fl_tensor *a) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_unary: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_reduce(fl_redop op, fl_tensor *dst, const fl_tensor *a, int dim) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_reduce: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_sumsq(const fl_tensor *t, double *out) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_sumsq: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_matmul(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_matmul: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_act_fwd(fl_act kind, const float *x, float *y, int64_t n) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_act_fwd: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_act_bwd(fl_act kind, const float *x, const float *dy, float *dx, int64_t n) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_act_bwd: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_dropout_fwd(const float *x, float *y, uint8_t *mask, int64_t n, float p, uint64_t seed, uint64_t offset) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_dropout_fwd: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_dropout_bwd(const uint8_t *mask, const float *dy, float *dx, int64_t n, float p) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_dropout_bwd: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_bias_add(float *y, const float *b, int64_t rows, int64_t cols) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_bias_add: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_softmax_fwd(bool log, const float *x, float *y, int64_t rows, int64_t cols) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_softmax_fwd: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_softmax_bwd(bool log, const float *y, const float *dy, float *dx, int64_t rows, int64_t cols) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_softmax_bwd: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_cross_entropy_fwd(const float *logits, const float *target, int64_t rows, int64_t cols, int64_t ignore_index, float label_smoothing, double *loss, int64_t *count) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_cross_entropy_fwd: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_cross_entropy_bwd(const float *logits, const float *target, int64_t rows, int64_t cols, int64_t ignore_index, float label_smoothing, float dloss, float *dlogits) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_cross_entropy_bwd: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_mse_fwd(const float *x, const float *y, int64_t n, double *sum) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_mse_fwd: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_mse_bwd(const float *x, const float *y, float *dx, int64_t n, float f) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_mse_bwd: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_layernorm_fwd(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd, int64_t rows, int64_t cols, float eps) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_layernorm_fwd: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_layernorm_bwd(const float *x, const float *w, const float *mean, const float *rstd, const float *dy, float *dx, float *dw, float *db, int64_t rows, int64_t cols) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_layernorm_bwd: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_embedding_fwd(const float *idx, int64_t n, const float *weight, int64_t vocab, int64_t dim, float *y) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_embedding_fwd: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_embedding_bwd(const float *idx, int64_t n, const float *dy, int64_t vocab, int64_t dim, float *dweight) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_embedding_bwd: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_sdpa_fwd(const float *q, const float *k, const float *v, float *out, float *att, int64_t B, int64_t H, int64_t T, int64_t D, float scale, bool causal) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_sdpa_fwd: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_sdpa_bwd(const float *q, const float *k, const float *v, const float *att, const float *dout, float *dq, float *dk, float *dv, int64_t B, int64_t H, int64_t T, int64_t D, float scale, bool causal) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_sdpa_bwd: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_sgd(float *p, const float *g, float *buf, int64_t n, double lr, double momentum, double dampening, double weight_decay, bool nesterov, bool first_step) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_sgd: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_adamw(float *p, const float *g, float *m, float *v, int64_t n, double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_adamw: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_msamp_adamw(fl_tensor *p, const fl_tensor *g, fl_tensor *m, fl_tensor *v, fl_tensor *v_scale_inv, fl_tensor *p_fp8, double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_msamp_adamw: not built yet");
}
extern "C" __attribute__((weak)) fl_status fl_cuda_dev_fp8_gemm(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, const fl_tensor *bias, fl_tensor **b_cache) {
    return FL_ERR(FL_EUNSUPPORTED, "fl_cuda_dev_fp8_gemm: not built yet");
}
