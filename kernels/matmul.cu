/* matmul.cu — the CUDA device's batched matmul (core/device.h `matmul`, the CPU's is core/cpu/cpu_matmul.c):
 * dst[z] = a[z]·b[z] for a [B, M, K], b [B, K, N], dst [B, M, N] contiguous, as ONE strided-batch
 * cuBLASLt GEMM (gemm_lt.h): no copies, whatever the operands' layouts.
 * Layouts: each operand's batch entries are row-major (stride[2] == 1, rows stride[1] apart) or
 * column-major — a transposed view such as a linear layer's Wᵀ (stride[1] == 1, columns stride[2]
 * apart); batch stride rows·cols, or 0 to broadcast one matrix over the batch. In gemm_lt's row-major
 * terms: a row-major a is A [m, k] (lda = stride[1]); a column-major a is A stored [k, m] (a_trans,
 * lda = stride[2]); a row-major b is B stored [k, n] (b_trans, ldb = stride[1]); a column-major b is
 * B stored [n, k] (ldb = stride[2]); D [m, n] with ldd = N, batch stride M·N.
 * Maths: fp32 accumulation; fp32 inputs multiply in true fp32 (no TF32, as the CPU), bf16/fp16 inputs
 * exactly; dst fp32 or the inputs' dtype (one RNE rounding). K == 0 gives zeros.
 * Tolerance: |gpu − cpu| ≤ 1e-5·Σ_k|a·b| + one rounding of dst's dtype (summation order differs from
 * oneDNN's); tests/c/test_gpu_ops.c. */
#include "cuda_common.cuh"
#include "fl_cuda_host.h"
#include "cuda_entries.h"

namespace {

/* How gemm_lt reads one [B, rows, cols] operand: row-major (ld = row pitch) or column-major
 * (ld = column pitch). Size-1 dims take the dense pitch, whatever their stride says. */
bool operand_layout(const fl_tensor *t, bool *colmajor, int64_t *ld) {
    const int64_t r = t->shape[1], c = t->shape[2];
    if ((c == 1 || t->stride[2] == 1) && (r == 1 || t->stride[1] >= c)) {
        *colmajor = false;
        *ld = r == 1 ? c : t->stride[1];
        return true;
    }
    if ((r == 1 || t->stride[1] == 1) && (c == 1 || t->stride[2] >= r)) {
        *colmajor = true;
        *ld = c == 1 ? r : t->stride[2];
        return true;
    }
    return false;
}

const char *dname(int dt) { return fl_format((fl_dtype)dt) ? fl_format((fl_dtype)dt)->name : "?"; }

fl_status check_tensor(const fl_tensor *t, bool host, const char *role) {
    if (!t) return FL_ERR(FL_EINVAL, "matmul on cuda: the %s tensor is missing", role);
    const int want = host ? FL_DEV_CPU : FL_DEV_CUDA;
    if (t->device != want)
        return FL_ERR(FL_EINVAL, "matmul on cuda: %s is a %s tensor, expected %s", role, fl_device_name(t->device),
                      host ? "cpu (host run)" : "cuda");
    if (t->ndim != 3) return FL_ERR(FL_EINVAL, "matmul on cuda: %s is %d-d, expected 3-d [B, rows, cols]", role, t->ndim);
    if (fl_tensor_numel(t) > 0 && (!t->storage || !t->storage->data))
        return FL_ERR(FL_EINVAL, "matmul on cuda: %s has no storage", role);
    return FL_OK;
}

/* The GEMM arguments for dst = a·b (device pointers of the tensors' device). */
fl_status matmul_args(const fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, bool host, fl_cuda_gemm_args *g) {
    FL_TRY(check_tensor(dst, host, "destination"));
    FL_TRY(check_tensor(a, host, "a"));
    FL_TRY(check_tensor(b, host, "b"));
    const int64_t B = dst->shape[0], M = dst->shape[1], N = dst->shape[2], K = a->shape[2];
    if (a->shape[0] != B || b->shape[0] != B || a->shape[1] != M || b->shape[1] != K || b->shape[2] != N)
        return FL_ERR(FL_EINVAL, "matmul on cuda: shapes [%lld, %lld, %lld] x [%lld, %lld, %lld] -> [%lld, %lld, %lld] "
                      "do not match", (long long)a->shape[0], (long long)a->shape[1], (long long)a->shape[2],
                      (long long)b->shape[0], (long long)b->shape[1], (long long)b->shape[2], (long long)B,
                      (long long)M, (long long)N);
    const bool in_ok = a->dtype == FL_F32 || a->dtype == FL_BF16 || a->dtype == FL_F16;
    if (!in_ok || b->dtype != a->dtype || (dst->dtype != FL_F32 && dst->dtype != a->dtype))
        return FL_ERR(FL_EINVAL, "matmul on cuda: expected two fp32, bf16 or fp16 operands of one dtype and an fp32 or "
                      "same-dtype result, got %s x %s -> %s", dname(a->dtype), dname(b->dtype), dname(dst->dtype));
    if (!fl_tensor_is_contiguous(dst)) return FL_ERR(FL_EINVAL, "matmul on cuda: the destination must be contiguous");
    bool a_col, b_col;
    int64_t lda, ldb;
    if (!operand_layout(a, &a_col, &lda) || !operand_layout(b, &b_col, &ldb) ||
        (B > 1 && (a->stride[0] < 0 || b->stride[0] < 0)))
        return FL_ERR(FL_EINVAL, "matmul on cuda: each operand must be row- or column-major per batch entry, got strides "
                      "[%lld, %lld, %lld] and [%lld, %lld, %lld]", (long long)a->stride[0], (long long)a->stride[1],
                      (long long)a->stride[2], (long long)b->stride[0], (long long)b->stride[1], (long long)b->stride[2]);
    fl_cuda_gemm_args_init(g, M, N, K);
    g->a = fl_tensor_data(a); g->a_dtype = a->dtype; g->lda = lda; g->a_trans = a_col;
    g->b = fl_tensor_data(b); g->b_dtype = b->dtype; g->ldb = ldb; g->b_trans = !b_col;
    g->d = fl_tensor_data(dst); g->d_dtype = dst->dtype; g->ldd = N;
    g->tf32 = false;   /* the CPU multiplies fp32 in fp32 */
    if (B > 1) {
        g->batch = B;
        g->stride_a = a->stride[0];
        g->stride_b = b->stride[0];
        g->stride_d = M * N;
    }
    return FL_OK;
}

}  // namespace

extern "C" fl_status fl_cuda_dev_matmul(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b) {
    fl_cuda_gemm_args g;
    FL_TRY(matmul_args(dst, a, b, false, &g));
    if (fl_tensor_numel(dst) == 0) return FL_OK;
    if (g.k == 0) return fl_cuda_dev_fill(dst, 0.0);
    return fl_cuda_gemm(&g, NULL);
}

/* For tests without a GPU: the GEMM arguments the entry would pass, for CPU tensors (host pointers). */
extern "C" fl_status fl_cuda_matmul_args_host(const fl_tensor *dst, const fl_tensor *a, const fl_tensor *b,
                                              fl_cuda_gemm_args *g) {
    return matmul_args(dst, a, b, true, g);
}
