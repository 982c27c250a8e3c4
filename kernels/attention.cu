/* attention.cu — scaled-dot-product attention on the GPU (the sdpa_fwd/sdpa_bwd entries; the CPU
 * reference is core/cpu/cpu_nn_attn.c). Maths on contiguous fp32 [B, H, T, D], one head per batch entry:
 *   forward   S = Q·Kᵀ;  att[i, j] = softmax_j(scale·S[i, j]) over j < n(i) (n = i + 1 causal, else T),
 *             att = 0 exactly for j ≥ n(i);  out = att·V
 *   backward  dP = dO·Vᵀ;  dS = scale·P ⊙ (dP − rowsum(P ⊙ dP)) over the live length of each row of P
 *             (up to its last nonzero entry, as the CPU does), 0 beyond;  dQ = dS·K, dK = dSᵀ·Q, dV = Pᵀ·dO
 * Causal attention runs in the CPU's blocks of query rows, skipping the products above the diagonal.
 * The products are fp32 strided-batch cuBLASLt GEMMs over all B·H heads (kernels/gemm_lt.h; true fp32
 * products, TF32 off), or with bf16 (bf16 autocast) bf16 GEMMs with fp32 accumulation on RNE-rounded copies
 * of every operand (Q, K, V, P; dO, dS), as the CPU rounds them — P's and dS's written by the row kernel that
 * makes them, the others by one conversion pass each; between the GEMMs one row kernel: a warp per row, lane l owning entries j ≡ l (mod 32)
 * in every pass, partial results combined by a fixed xor-butterfly, so runs are bit-identical. The row
 * arithmetic is separately rounded and its exp is core/cpu's fl_nn_expf step for step, so given the same
 * scores a row matches the CPU up to the order of its sums; the __host__ __device__ row code also runs on
 * the host (fl_cuda_attn_*_host) for tests without a GPU.
 * Tolerance (tests/c/test_gpu_train_ops.c): float64 references with error bounds derived from fp32
 * dot-product error ((k+2)·2^-24·Σ|terms|) propagated through the softmax. */
#include "cuda_common.cuh"
#include "fl_cuda_host.h"
#include "cuda_entries.h"
#include "gemm_lt.h"

namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;                 /* one warp per row */
constexpr int kThreads = kWarp * kRowsPerBlock;
constexpr int64_t kMaxBatch = 65535;             /* GEMM batches per cuBLASLt call (conservative) */


/* ---- row code: lane `lane` of a warp handles entries lane, lane + 32, ... of one row ----------- */

/* Keys row i attends to. */
FL_HD int64_t attn_row_len(int64_t i, int64_t T, bool causal) { return causal ? i + 1 : T; }

/* Forward pass 1: this lane's max of scale·s[j] over j < n (NaN never wins, as on the CPU). */
FL_HD float sm_max_part(const float *s, int64_t n, float scale, int lane) {
    float m = -INFINITY;
    for (int64_t j = lane; j < n; j += kWarp) {
        float x = fl_fmul(s[j], scale);
        m = x > m ? x : m;
    }
    return m;
}

/* Forward pass 2: s[j] ← exp(scale·s[j] − m) for j < n; returns this lane's sum of them. */
FL_HD float sm_exp_part(float *s, int64_t n, float scale, float m, int lane) {
    float sum = 0.0f;
    for (int64_t j = lane; j < n; j += kWarp) {
        float e = fl_cu_expf(fl_fsub(fl_fmul(s[j], scale), m));
        s[j] = e;
        sum = fl_fadd(sum, e);
    }
    return sum;
}

/* Forward pass 3: s[j] ← s[j]·inv for j < n, exact zeros for j in [n, T). */
FL_HD void sm_norm_part(float *s, int64_t n, int64_t T, float inv, int lane) {
    for (int64_t j = lane; j < T; j += kWarp) s[j] = j < n ? fl_fmul(s[j], inv) : 0.0f;
}

/* Backward pass 1: 1 + the last index j of this lane with p[j] != 0 (0 if none). The row's live length
 * is max(1, max over lanes): the CPU's `while (n > 1 && p[n-1] == 0) n--`. */
FL_HD int64_t live_part(const float *p, int64_t T, int lane) {
    int64_t last = 0;
    for (int64_t j = lane; j < T; j += kWarp)
        if (p[j] != 0.0f) last = j + 1;
    return last;
}

/* Backward pass 2: this lane's Σ p[j]·d[j] over j < n. */
FL_HD float dot_part(const float *p, const float *d, int64_t n, int lane) {
    float acc = 0.0f;
    for (int64_t j = lane; j < n; j += kWarp) acc = fl_fadd(acc, fl_fmul(p[j], d[j]));
    return acc;
}

/* Backward pass 3: d[j] ← scale·p[j]·(d[j] − dot) for j < n, 0 beyond (cpu_nn_attn.c dsoftmax_row); with d16,
 * the value goes only into d16[j] as bf16 (the bf16 GEMMs' operand) and d keeps dP: under bf16 nothing reads the
 * fp32 dS, so it is not written. */
FL_HD void ds_write_part(const float *p, float *d, uint16_t *d16, int64_t n, int64_t T, float dot, float scale,
                         int lane) {
    for (int64_t j = lane; j < T; j += kWarp) {
        const float v = j < n ? fl_fmul(fl_fmul(scale, p[j]), fl_fsub(d[j], dot)) : 0.0f;
        if (d16) d16[j] = fl_f32_to_bf16_bits(v);
        else d[j] = v;
    }
}

/* Warp combinations: lane l takes op(v[l], v[l ^ o]) for o = 16, 8, 4, 2, 1 (every lane ends with the
 * same value; the host emulation below repeats exactly these steps). */
__device__ __forceinline__ float warp_max(float v) {
    for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = kWarp / 2; o > 0; o >>= 1) v = fl_fadd(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ int64_t warp_max_i64(int64_t v) {
    for (int o = kWarp / 2; o > 0; o >>= 1) {
        long long w = __shfl_xor_sync(0xffffffffu, (long long)v, o);
        v = w > v ? w : v;
    }
    return v;
}

/* The row just written (this lane's entries) as bf16 into out16, when given: the bf16 GEMMs' operand made
 * while the row is still in cache, instead of a separate pass over the whole matrix. */
__device__ __forceinline__ void row_bf16(const float *v, uint16_t *out16, int64_t T, int lane) {
    if (out16)
        for (int64_t j = lane; j < T; j += kWarp) out16[j] = fl_f32_to_bf16_bits(v[j]);
}

/* att holds S = Q·Kᵀ for rows·T entries (rows = B·H·T); softmax in place (and its bf16 copy into p16 when
 * given). The row loop is warp-uniform, so the full-mask shuffles see every lane. */
__global__ void __launch_bounds__(kThreads) attn_softmax_kernel(float *att, int64_t rows, int64_t T, float scale,
                                                                bool causal, uint16_t *p16) {
    const int lane = threadIdx.x & (kWarp - 1);
    const int64_t nwarps = (int64_t)gridDim.x * kRowsPerBlock;
    for (int64_t r = (int64_t)blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5); r < rows; r += nwarps) {
        float *s = att + r * T;
        const int64_t n = attn_row_len(r % T, T, causal);
        const float m = warp_max(sm_max_part(s, n, scale, lane));
        const float sum = warp_sum(sm_exp_part(s, n, scale, m, lane));
        sm_norm_part(s, n, T, fl_fdiv(1.0f, sum), lane);
        __syncwarp();
        row_bf16(s, p16 ? p16 + r * T : NULL, T, lane);
    }
}

/* ds holds dP = dO·Vᵀ; replaced by dS, or with s16 given dS goes into s16 as bf16 only (ds_write_part). */
__global__ void __launch_bounds__(kThreads) attn_dsoftmax_kernel(const float *att, float *ds, int64_t rows, int64_t T,
                                                                 float scale, uint16_t *s16) {
    const int lane = threadIdx.x & (kWarp - 1);
    const int64_t nwarps = (int64_t)gridDim.x * kRowsPerBlock;
    for (int64_t r = (int64_t)blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5); r < rows; r += nwarps) {
        const float *p = att + r * T;
        float *d = ds + r * T;
        int64_t n = warp_max_i64(live_part(p, T, lane));
        if (n < 1) n = 1;
        const float dot = warp_sum(dot_part(p, d, n, lane));
        ds_write_part(p, d, s16 ? s16 + r * T : NULL, n, T, dot, scale, lane);
    }
}

/* ---- launches ------------------------------------------------------------------------------------- */

/* The row pass over rows_buf (softmax, or dS from dP with backward), writing its bf16 copy into out16
 * too when given. */
fl_status launch_rows(bool backward, const float *att_in, float *rows_buf, int64_t rows, int64_t T, float scale,
                      bool causal, uint16_t *out16 = NULL) {
    if (rows == 0) return FL_OK;
    const unsigned grid = grid_for_work((size_t)rows, kRowsPerBlock, 8);
    cudaStream_t st = fl_cuda_stream();
    if (backward) {
        attn_dsoftmax_kernel<<<grid, kThreads, 0, st>>>(att_in, rows_buf, rows, T, scale, out16);
        FL_CUDA_CHECK(cudaGetLastError(), "attn_dsoftmax_kernel launch");
    } else {
        attn_softmax_kernel<<<grid, kThreads, 0, st>>>(rows_buf, rows, T, scale, causal, out16);
        FL_CUDA_CHECK(cudaGetLastError(), "attn_softmax_kernel launch");
    }
    return FL_OK;
}

/* One operand of a batched GEMM: base pointer (fp32, or bf16 bits in bf16 mode), leading dimension,
 * stored transposed, batch stride (elements). */
struct Opnd {
    const void *p;
    int64_t ld;
    bool trans;
    int64_t stride;
};

/* D[z] = op(A[z])·op(B[z]) for z < batch (gemm_lt.h's row-major semantics), A and B of dtype `in` (fp32
 * or bf16), fp32 D and accumulation. */
fl_status bgemm(fl_dtype in, int64_t batch, int64_t m, int64_t n, int64_t k, Opnd a, Opnd b, float *d, int64_t ldd,
                int64_t stride_d) {
    fl_cuda_gemm_args g;
    fl_cuda_gemm_args_init(&g, m, n, k);
    g.a_dtype = g.b_dtype = in;
    g.d_dtype = FL_F32;
    g.lda = a.ld; g.a_trans = a.trans;
    g.ldb = b.ld; g.b_trans = b.trans;
    g.ldd = ldd;
    g.tf32 = false;
    const size_t es = in == FL_F32 ? sizeof(float) : sizeof(uint16_t);
    for (int64_t z0 = 0; z0 < batch; z0 += kMaxBatch) {
        const int64_t nb = batch - z0 < kMaxBatch ? batch - z0 : kMaxBatch;
        g.a = static_cast<const char *>(a.p) + (size_t)(z0 * a.stride) * es;
        g.b = static_cast<const char *>(b.p) + (size_t)(z0 * b.stride) * es;
        g.d = d + z0 * stride_d;
        g.batch = nb;
        g.stride_a = a.stride; g.stride_b = b.stride; g.stride_d = stride_d;
        FL_TRY(fl_cuda_gemm(&g, NULL));
    }
    return FL_OK;
}

__global__ void __launch_bounds__(kThreads) to_bf16_kernel(const float *x, uint16_t *y, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = fl_f32_to_bf16_bits(x[i]);
}

/* The GEMM operands of one call: each fp32 array as it is, or (bf16 mode) its RNE bf16 copy in scratch. */
struct Operands {
    bool bf16;
    fl_cu_scratch buf[6];
    int used = 0;
    explicit Operands(bool b) : bf16(b) {}
    fl_dtype dtype() const { return bf16 ? FL_BF16 : FL_F32; }
    fl_status get(const float *x, size_t n, const void **out) {
        if (!bf16) { *out = x; return FL_OK; }
        fl_cu_scratch &s = buf[used++];
        FL_TRY(s.alloc(n * sizeof(uint16_t)));
        if (n) {
            size_t g = (n + kThreads - 1) / kThreads, cap = (size_t)fl_cuda_sm_count() * 8;
            to_bf16_kernel<<<(unsigned)(g < cap ? g : cap), kThreads, 0, fl_cuda_stream()>>>(x, static_cast<uint16_t *>(s.p), n);
            FL_CUDA_CHECK(cudaGetLastError(), "to_bf16_kernel launch");
        }
        *out = s.p;
        return FL_OK;
    }
    /* An uninitialised bf16 buffer of n elements (bf16 mode), for a row pass to fill; NULL otherwise. */
    fl_status empty16(size_t n, uint16_t **out) {
        *out = NULL;
        if (!bf16) return FL_OK;
        fl_cu_scratch &s = buf[used++];
        FL_TRY(s.alloc(n * sizeof(uint16_t)));
        *out = static_cast<uint16_t *>(s.p);
        return FL_OK;
    }
};

/* p advanced by n elements of dtype `in` (fp32 or bf16). */
const void *adv(const void *p, int64_t n, fl_dtype in) {
    return static_cast<const char *>(p) + (size_t)n * (in == FL_F32 ? sizeof(float) : sizeof(uint16_t));
}

/* Causal attention in blocks of query rows, as core/cpu/cpu_nn_attn.c does it: rows [i0, i1) only see keys
 * [0, i1), so the GEMMs skip the rest (with 8 blocks, 9/16 of the square is computed). About 64 rows a
 * block, at most 8; one block when not causal. The blocks are the CPU's, so both devices sum the same
 * products. */
int64_t attn_nblocks(int64_t T, bool causal) {
    if (!causal) return 1;
    int64_t nb = (T + 63) / 64;
    return nb > 8 ? 8 : nb;
}

/* The products of one row block loop, over all B·H heads (operands of dtype `in`, [T, D] and [T, T] per head):
 *   scores:  dst[i0:i1, 0:nk] = A[i0:i1, :] · B[0:nk, :]ᵀ        (S = Q·Kᵀ, dP = dO·Vᵀ; dst [T, T])
 *   apply:   dst[i0:i1, :]    = M[i0:i1, 0:nk] · B[0:nk, :]        (O = P·V, dQ = dS·K; M [T, T], dst [T, D])
 * with nk = i1 when causal, else T. */
fl_status scores_blocks(fl_dtype in, int64_t BH, int64_t T, int64_t D, bool causal, const void *a, const void *b,
                        float *dst) {
    const int64_t nb = attn_nblocks(T, causal), Tb = (T + nb - 1) / nb;
    for (int64_t i0 = 0; i0 < T; i0 += Tb) {
        const int64_t i1 = i0 + Tb < T ? i0 + Tb : T, nk = causal ? i1 : T;
        FL_TRY(bgemm(in, BH, i1 - i0, nk, D, Opnd{ adv(a, i0 * D, in), D, false, T * D }, Opnd{ b, D, false, T * D },
                     dst + i0 * T, T, T * T));
    }
    return FL_OK;
}

fl_status apply_blocks(fl_dtype in, int64_t BH, int64_t T, int64_t D, bool causal, const void *m, const void *b,
                       float *dst) {
    const int64_t nb = attn_nblocks(T, causal), Tb = (T + nb - 1) / nb;
    for (int64_t i0 = 0; i0 < T; i0 += Tb) {
        const int64_t i1 = i0 + Tb < T ? i0 + Tb : T, nk = causal ? i1 : T;
        FL_TRY(bgemm(in, BH, i1 - i0, D, nk, Opnd{ adv(m, i0 * T, in), T, false, T * T }, Opnd{ b, D, true, T * D },
                     dst + i0 * D, D, T * D));
    }
    return FL_OK;
}

fl_status check_sizes(const char *fn, int64_t B, int64_t H, int64_t T, int64_t D) {
    if (B < 0 || H < 0 || T < 0 || D < 0)
        return FL_ERR(FL_EINVAL, "%s: sizes must be >= 0, got B=%lld H=%lld T=%lld D=%lld", fn, (long long)B,
                      (long long)H, (long long)T, (long long)D);
    /* B·H·T·T and B·H·T·D must be representable (element offsets are int64). */
    const double e = (double)B * (double)H * (double)T * (double)(T > D ? T : D);
    if (e > 9.0e18) return FL_ERR(FL_EINVAL, "%s: B·H·T·max(T, D) = %g elements is too large", fn, e);
    return FL_OK;
}


}  // namespace

extern "C" fl_status fl_cuda_dev_sdpa_fwd(const float *q, const float *k, const float *v, float *out, float *att,
                                          int64_t B, int64_t H, int64_t T, int64_t D, float scale, bool causal,
                                          bool bf16) {
    const char *fn = "cuda sdpa_fwd";
    FL_TRY(check_sizes(fn, B, H, T, D));
    const int64_t BH = B * H, rows = BH * T;
    if (rows == 0) return FL_OK;
    if (!att || (D > 0 && (!q || !k || !v || !out))) return FL_ERR(FL_EINVAL, "%s: a NULL array", fn);
    const int64_t sq = T * D, sa = T * T;
    if (D == 0) {
        /* No features: every score is 0, so each row is uniform over its keys (as the CPU computes it). */
        FL_CUDA_CHECK(cudaMemsetAsync(att, 0, (size_t)(BH * sa) * sizeof(float), fl_cuda_stream()), "cudaMemsetAsync");
        return launch_rows(false, NULL, att, rows, T, scale, causal);
    }
    Operands op(bf16);
    const void *q_, *k_, *v_, *p_;
    FL_TRY(op.get(q, (size_t)(BH * sq), &q_));
    FL_TRY(op.get(k, (size_t)(BH * sq), &k_));
    FL_TRY(op.get(v, (size_t)(BH * sq), &v_));
    const fl_dtype in = op.dtype();
    /* S = Q·Kᵀ by row blocks; the row kernel then reads only j < n(i) <= nk and writes the zeros beyond. */
    FL_TRY(scores_blocks(in, BH, T, D, causal, q_, k_, att));
    uint16_t *p16;
    FL_TRY(op.empty16((size_t)(BH * sa), &p16));
    FL_TRY(launch_rows(false, NULL, att, rows, T, scale, causal, p16));
    p_ = bf16 ? (const void *)p16 : (const void *)att;
    /* out = P·V by row blocks. Scratch goes back on return, after these on the stream. */
    return apply_blocks(in, BH, T, D, causal, p_, v_, out);
}

extern "C" fl_status fl_cuda_dev_sdpa_bwd(const float *q, const float *k, const float *v, const float *att,
                                          const float *dout, float *dq, float *dk, float *dv, int64_t B, int64_t H,
                                          int64_t T, int64_t D, float scale, bool causal, bool bf16) {
    const char *fn = "cuda sdpa_bwd";
    FL_TRY(check_sizes(fn, B, H, T, D));
    const int64_t BH = B * H, rows = BH * T;
    if (rows == 0 || D == 0) return FL_OK;   /* dq, dk, dv have no elements */
    if (!q || !k || !v || !att || !dout || !dq || !dk || !dv) return FL_ERR(FL_EINVAL, "%s: a NULL array", fn);
    const int64_t sq = T * D, sa = T * T;
    fl_cu_scratch ds;
    FL_TRY(ds.alloc((size_t)(BH * sa) * sizeof(float)));
    float *dsp = static_cast<float *>(ds.p);
    Operands op(bf16);
    const void *q_, *k_, *v_, *o_, *p_, *s_;
    FL_TRY(op.get(dout, (size_t)(BH * sq), &o_));
    FL_TRY(op.get(v, (size_t)(BH * sq), &v_));
    const fl_dtype in = op.dtype();
    /* Row blocks as in forward; `causal` only decides which products are skipped: above the diagonal P = 0,
     * so dS = 0 there either way. */
    const int64_t nb = attn_nblocks(T, causal), Tb = (T + nb - 1) / nb;
    FL_TRY(scores_blocks(in, BH, T, D, causal, o_, v_, dsp));   /* dP = dO·Vᵀ */
    uint16_t *s16;
    FL_TRY(op.empty16((size_t)(BH * sa), &s16));
    FL_TRY(launch_rows(true, att, dsp, rows, T, scale, causal, s16));
    s_ = bf16 ? (const void *)s16 : (const void *)dsp;
    FL_TRY(op.get(k, (size_t)(BH * sq), &k_));
    FL_TRY(op.get(q, (size_t)(BH * sq), &q_));
    FL_TRY(op.get(att, (size_t)(BH * sa), &p_));
    FL_TRY(apply_blocks(in, BH, T, D, causal, s_, k_, dq));     /* dQ = dS·K */
    /* Key blocks [j0, j1), seen only by rows r >= r0 (r0 = j0 when causal):
     *   dK = dSᵀ·Q: A = dSᵀ, i.e. dS rows [r0, T) × keys [j0, j1) stored [k, m]; B = Q rows [r0, T) stored [k, n];
     *   dV = Pᵀ·dO: the same with P and dO.
     * ds and the copies go back to the allocator on return; whoever gets them next is ordered after these
     * GEMMs on the one stream. */
    for (int64_t j0 = 0; j0 < T; j0 += Tb) {
        const int64_t j1 = j0 + Tb < T ? j0 + Tb : T, r0 = causal ? j0 : 0;
        FL_TRY(bgemm(in, BH, j1 - j0, D, T - r0, Opnd{ adv(s_, r0 * T + j0, in), T, true, sa },
                     Opnd{ adv(q_, r0 * D, in), D, true, sq }, dk + j0 * D, D, sq));
        FL_TRY(bgemm(in, BH, j1 - j0, D, T - r0, Opnd{ adv(p_, r0 * T + j0, in), T, true, sa },
                     Opnd{ adv(o_, r0 * D, in), D, true, sq }, dv + j0 * D, D, sq));
    }
    return FL_OK;
}

/* ---- the row code on the host (tests) ------------------------------------------------------------
 * Each row as one warp runs it: 32 lane partials, then the same xor-butterfly combination. */

namespace {

template <class Op>
float butterfly(float *v, Op op) {
    for (int o = kWarp / 2; o > 0; o >>= 1) {
        float t[kWarp];
        for (int l = 0; l < kWarp; l++) t[l] = op(v[l], v[l ^ o]);
        for (int l = 0; l < kWarp; l++) v[l] = t[l];
    }
    return v[0];
}

}  // namespace


/* att: rows·T scores (rows = B·H·T), replaced by the probabilities, as attn_softmax_kernel does. */
extern "C" void fl_cuda_attn_softmax_rows_host(float *att, int64_t rows, int64_t T, float scale, bool causal) {
    float part[kWarp];
    for (int64_t r = 0; r < rows; r++) {
        float *s = att + r * T;
        const int64_t n = attn_row_len(r % T, T, causal);
        for (int l = 0; l < kWarp; l++) part[l] = sm_max_part(s, n, scale, l);
        const float m = butterfly(part, [](float a, float b) { return fmaxf(a, b); });
        for (int l = 0; l < kWarp; l++) part[l] = sm_exp_part(s, n, scale, m, l);
        const float sum = butterfly(part, [](float a, float b) { return fl_fadd(a, b); });
        const float inv = fl_fdiv(1.0f, sum);
        for (int l = 0; l < kWarp; l++) sm_norm_part(s, n, T, inv, l);
    }
}

/* ds: rows·T entries of dP, replaced by dS (s16 NULL) or left as dP with dS in s16 as bf16, as
 * attn_dsoftmax_kernel does. */
extern "C" void fl_cuda_attn_dsoftmax_rows_host(const float *att, float *ds, uint16_t *s16, int64_t rows, int64_t T,
                                                float scale) {
    float part[kWarp];
    for (int64_t r = 0; r < rows; r++) {
        const float *p = att + r * T;
        float *d = ds + r * T;
        int64_t n = 0;
        for (int l = 0; l < kWarp; l++) {
            int64_t x = live_part(p, T, l);
            n = x > n ? x : n;
        }
        if (n < 1) n = 1;
        for (int l = 0; l < kWarp; l++) part[l] = dot_part(p, d, n, l);
        const float dot = butterfly(part, [](float a, float b) { return fl_fadd(a, b); });
        for (int l = 0; l < kWarp; l++) ds_write_part(p, d, s16 ? s16 + r * T : NULL, n, T, dot, scale, l);
    }
}
