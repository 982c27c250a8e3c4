/* gemm_lt.cu — FP8 and high-precision GEMMs through cuBLASLt (semantics in gemm_lt.h).
 * Maths: D = (a_scale_inv·b_scale_inv)·op(A)·op(B) (+ bias) (+ D), fp32 accumulation; FP8 D is
 * cast(D·d_scale). Layout: our row-major D[m, n] is cuBLASLt's column-major Dᵀ[n, m] = op(B)·op(A)ᵀ,
 * so cuBLASLt's "A" is our B and its "B" is our A; our FP8 layout (A [m, k], B [n, k], both K-major)
 * is then exactly the transa = T, transb = N ("TN") that Hopper FP8 kernels require, and the bias
 * (one per column of our D) runs along cuBLASLt's rows, as its bias epilogue wants.
 * cuBLASLt is loaded with dlopen on the first GEMM (so fp8lab starts without it and a build without
 * it still runs everything else); override the library with FP8LAB_CUBLASLT=/path/libcublasLt.so.
 * Strided batches (high precision only) set BATCH_COUNT and STRIDED_BATCH_OFFSET on all four layouts;
 * an entry's alignment is that of its base pointer and of its batch stride in bytes.
 * Plans (descriptors, layouts, the heuristic's algorithm) are cached per shape/dtype/layout/epilogue/
 * alignment/batch and strides; when cuBLASLt takes no bias epilogue or AMAX_D for a combination, a small
 * kernel adds the bias / computes the amax after the GEMM instead.
 * Tolerance: |gpu − ref| ≤ 1e-5·Σ|a·b| (+ output rounding) against float64 sums of the decoded
 * operands; fast accumulation looser (tests/c/test_gpu_fp8.c says how and why). */
#include "cuda_common.cuh"
#include <mutex>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <unordered_map>

namespace {

uint32_t alignment_of(const void *p) {
    uint32_t a = 256;
    while (a > 1 && ((uintptr_t)p % a) != 0) a >>= 1;
    return a;
}

bool fp8_gemm(const fl_cuda_gemm_args *g) { return is_fp8_dtype(g->a_dtype) || is_fp8_dtype(g->b_dtype); }

/* Strided batch: batch 0 and 1 are one GEMM (strides ignored). */
bool batched(const fl_cuda_gemm_args *g) { return g->batch > 1; }

/* The alignment cuBLASLt may assume for an operand: of its base pointer and, in a strided batch, of
 * every entry (base + z·stride elements), so an odd stride lowers it. */
uint32_t operand_alignment(const fl_cuda_gemm_args *g, const void *p, fl_dtype dt, int64_t stride) {
    uint32_t a = alignment_of(p);
    if (batched(g) && stride != 0) {
        uint64_t bytes = (uint64_t)stride * (uint64_t)(fl_format(dt) ? fl_format(dt)->size : 1);
        while (a > 1 && bytes % a != 0) a >>= 1;
    }
    return a;
}
uint32_t align_a(const fl_cuda_gemm_args *g) { return operand_alignment(g, g->a, g->a_dtype, g->stride_a); }
uint32_t align_b(const fl_cuda_gemm_args *g) { return operand_alignment(g, g->b, g->b_dtype, g->stride_b); }
uint32_t align_d(const fl_cuda_gemm_args *g) { return operand_alignment(g, g->d, g->d_dtype, g->stride_d); }

/* Whether cuBLASLt's bias epilogue takes this bias dtype: FP8 inputs want bf16 (fp16 for fp16 D);
 * other GEMMs want D's dtype. */
bool lt_bias_ok(const fl_cuda_gemm_args *g) {
    if (!g->bias) return false;
    if (fp8_gemm(g)) return g->bias_dtype == (g->d_dtype == FL_F16 ? FL_F16 : FL_BF16);
    return g->bias_dtype == g->d_dtype;
}

/* ---- checks ------------------------------------------------------------------------------------- */

const char *dtn(fl_dtype t) { return fl_format(t) ? fl_format(t)->name : "?"; }

fl_status check_args(const fl_cuda_gemm_args *g) {
    if (!g) return FL_ERR(FL_EINVAL, "cuda gemm: no arguments");
    char ctx[200];
    snprintf(ctx, sizeof ctx, "cuda gemm %s x %s -> %s [m=%lld n=%lld k=%lld]", dtn(g->a_dtype), dtn(g->b_dtype),
             dtn(g->d_dtype), (long long)g->m, (long long)g->n, (long long)g->k);
    if (g->m < 0 || g->n < 0 || g->k < 1) return FL_ERR(FL_EINVAL, "%s: sizes must be m, n >= 0 and k >= 1", ctx);
    if (!g->a || !g->b || !g->d) return FL_ERR(FL_EINVAL, "%s: A, B and D must be device pointers", ctx);
    if (g->lda < (g->a_trans ? g->m : g->k) || g->ldb < (g->b_trans ? g->n : g->k) || g->ldd < g->n)
        return FL_ERR(FL_EINVAL, "%s: leading dimensions lda=%lld ldb=%lld ldd=%lld are shorter than the rows", ctx,
                      (long long)g->lda, (long long)g->ldb, (long long)g->ldd);
    if (g->bias && g->bias_dtype != FL_F32 && g->bias_dtype != FL_BF16 && g->bias_dtype != FL_F16)
        return FL_ERR(FL_EINVAL, "%s: bias must be fp32, bf16 or fp16, got %s", ctx, dtn(g->bias_dtype));
    if (g->batch < 0 || g->batch > INT32_MAX)
        return FL_ERR(FL_EINVAL, "%s: batch %lld out of range (0 or 1: one GEMM; at most %d)", ctx,
                      (long long)g->batch, INT32_MAX);
    if (batched(g)) {
        if (g->stride_a < 0 || g->stride_b < 0 || g->stride_d <= 0)
            return FL_ERR(FL_EINVAL, "%s: batch %lld needs batch strides stride_a, stride_b >= 0 and stride_d > 0 "
                          "(got %lld, %lld, %lld; every entry must write its own D)", ctx, (long long)g->batch,
                          (long long)g->stride_a, (long long)g->stride_b, (long long)g->stride_d);
        if (fp8_gemm(g) || is_fp8_dtype(g->d_dtype))
            return FL_ERR(FL_EUNSUPPORTED, "%s: strided batch (batch %lld) is for high-precision GEMMs only, not FP8",
                          ctx, (long long)g->batch);
        if (g->bias || g->d_amax)
            return FL_ERR(FL_EINVAL, "%s: strided batch (batch %lld) takes no %s", ctx, (long long)g->batch,
                          g->bias ? "bias" : "d_amax");
    }
    size_t dsz = fl_format(g->d_dtype) ? fl_format(g->d_dtype)->size : 0;
    if (fp8_gemm(g)) {
        if (!is_fp8_dtype(g->a_dtype) || !is_fp8_dtype(g->b_dtype))
            return FL_ERR(FL_EUNSUPPORTED, "%s: an FP8 GEMM takes two FP8 operands", ctx);
        if (g->a_dtype == FL_E5M2 && g->b_dtype == FL_E5M2)
            return FL_ERR(FL_EUNSUPPORTED, "%s: e5m2 x e5m2 is not supported (one operand must be e4m3)", ctx);
        if (g->a_trans || g->b_trans)
            return FL_ERR(FL_EUNSUPPORTED, "%s: FP8 GEMMs take only A [m, k] and B [n, k] (Hopper's TN layout); "
                          "cast_transpose makes the transposed copies", ctx);
        if (!g->a_scale_inv || !g->b_scale_inv) return FL_ERR(FL_EINVAL, "%s: FP8 operands need their scale_inv", ctx);
        if (g->d_dtype != FL_F32 && g->d_dtype != FL_BF16 && g->d_dtype != FL_F16 && !is_fp8_dtype(g->d_dtype))
            return FL_ERR(FL_EINVAL, "%s: D must be fp32, bf16, fp16, e4m3 or e5m2", ctx);
        if (is_fp8_dtype(g->d_dtype) && (!g->d_scale || g->accumulate))
            return FL_ERR(FL_EINVAL, "%s: an FP8 D needs d_scale and cannot accumulate", ctx);
        if (is_fp8_dtype(g->d_dtype) && g->bias && !lt_bias_ok(g))
            return FL_ERR(FL_EUNSUPPORTED, "%s: with an FP8 D the bias must be bf16", ctx);
        if (g->k % 16 || g->n % 16 || g->lda % 16 || g->ldb % 16 || (g->ldd * (int64_t)dsz) % 16)
            return FL_ERR(FL_EUNSUPPORTED, "%s: FP8 GEMMs need k and n multiples of 16 and 16-byte row pitches "
                          "(lda=%lld ldb=%lld ldd=%lld)", ctx, (long long)g->lda, (long long)g->ldb, (long long)g->ldd);
        if (alignment_of(g->a) < 16 || alignment_of(g->b) < 16 || alignment_of(g->d) < 16)
            return FL_ERR(FL_EUNSUPPORTED, "%s: FP8 GEMM operands must be 16-byte aligned", ctx);
    } else {
        bool ok_in = g->a_dtype == g->b_dtype &&
                     (g->a_dtype == FL_F32 || g->a_dtype == FL_BF16 || g->a_dtype == FL_F16);
        if (!ok_in) return FL_ERR(FL_EUNSUPPORTED, "%s: expected two fp32, two bf16 or two fp16 operands", ctx);
        if (g->d_dtype != g->a_dtype && g->d_dtype != FL_F32)
            return FL_ERR(FL_EUNSUPPORTED, "%s: D must be fp32 or the operands' dtype", ctx);
        if (g->fast_accum) return FL_ERR(FL_EINVAL, "%s: fast_accum is for FP8 GEMMs", ctx);
    }
    return FL_OK;
}

}  // namespace

extern "C" void fl_cuda_gemm_args_init(fl_cuda_gemm_args *a, int64_t m, int64_t n, int64_t k) {
    memset(a, 0, sizeof *a);
    a->m = m; a->n = n; a->k = k;
    a->lda = k; a->ldb = k; a->ldd = n;
    a->a_dtype = a->b_dtype = a->d_dtype = a->bias_dtype = FL_F32;
}

#ifdef FL_HAVE_CUBLASLT   /* the Makefile's probe: cublasLt.h compiles with nvcc */
#include <cublasLt.h>
#include <dlfcn.h>

namespace {

/* ---- cuBLASLt, loaded on first use -------------------------------------------------------------- */

#define FL_LT_FUNCS(X)                                                                                       \
    X(cublasLtCreate) X(cublasLtGetStatusName) X(cublasLtGetVersion) X(cublasLtMatmulDescCreate)            \
    X(cublasLtMatmulDescSetAttribute) X(cublasLtMatmulDescDestroy) X(cublasLtMatrixLayoutCreate)           \
    X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate)      \
    X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulAlgoGetHeuristic) \
    X(cublasLtMatmul)

struct LtApi {
#define FL_LT_PTR(f) decltype(&::f) f;
    FL_LT_FUNCS(FL_LT_PTR)
#undef FL_LT_PTR
};

constexpr size_t kWorkspace = (size_t)32 << 20;
constexpr int kThreads = 256;

std::mutex mu;                 /* guards everything below, and each GEMM's enqueue */
LtApi lt;
int lt_state;                  /* 0 untried, 1 loaded, -1 unavailable */
char lt_reason[512];
size_t heuristic_calls;

fl_status load_lt_locked(void) {
    if (lt_state > 0) return FL_OK;
    if (lt_state < 0) return FL_ERR(FL_EDEVICE, "%s", lt_reason);
    std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    std::string cands[5];
    int nc = 0;
    if (const char *e = getenv("FP8LAB_CUBLASLT")) cands[nc++] = e;
    cands[nc++] = soname;
    if (const char *e = getenv("CUDA_HOME")) cands[nc++] = std::string(e) + "/lib64/" + soname;
    cands[nc++] = "/usr/local/cuda/lib64/" + soname;
    cands[nc++] = "libcublasLt.so";
    void *h = NULL;
    std::string why;
    for (int i = 0; i < nc && !h; i++) {
        h = dlopen(cands[i].c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!h && why.empty()) { const char *e = dlerror(); why = e ? e : "not found"; }
    }
    if (!h) {
        lt_state = -1;
        snprintf(lt_reason, sizeof lt_reason, "cuBLASLt unavailable: dlopen %s failed: %s (FP8LAB_CUBLASLT names "
                 "the library)", soname.c_str(), why.c_str());
        return FL_ERR(FL_EDEVICE, "%s", lt_reason);
    }
#define FL_LT_SYM(f)                                                                                        \
    if (!(lt.f = (decltype(lt.f))dlsym(h, #f))) {                                                           \
        lt_state = -1;                                                                                      \
        snprintf(lt_reason, sizeof lt_reason, "cuBLASLt unavailable: %s has no %s", soname.c_str(), #f);   \
        return FL_ERR(FL_EDEVICE, "%s", lt_reason);                                                         \
    }
    FL_LT_FUNCS(FL_LT_SYM)
#undef FL_LT_SYM
    lt_state = 1;
    return FL_OK;
}

fl_status lt_fail(cublasStatus_t s, const char *what, const char *ctx, const char *file, int line) {
    const char *name = lt_state > 0 ? lt.cublasLtGetStatusName(s) : "?";
    return fl_set_error(s == CUBLAS_STATUS_NOT_SUPPORTED ? FL_EUNSUPPORTED : FL_EDEVICE, file, line,
                        "%s failed: %s (%d) in %s", what, name ? name : "?", (int)s, ctx);
}
#define LT_CHECK(call, what)                                                                      \
    do { cublasStatus_t lt__s = (call);                                                           \
         if (lt__s != CUBLAS_STATUS_SUCCESS) return lt_fail(lt__s, what, ctx, __FILE__, __LINE__); } while (0)
#define CU_CHECK(call, what)                                                                      \
    do { cudaError_t cu__e = (call);                                                              \
         if (cu__e != cudaSuccess) { (void)cudaGetLastError();                                    \
             return fl_set_error(FL_EDEVICE, __FILE__, __LINE__, "%s failed: %s: %s in %s", what,  \
                                 cudaGetErrorName(cu__e), cudaGetErrorString(cu__e), ctx); } } while (0)

/* ---- plans ---------------------------------------------------------------------------------------- */

struct Key {                       /* memset to 0 before filling: compared and hashed as bytes */
    int32_t adt, bdt, ddt, biasdt; /* biasdt −1: no bias */
    int32_t a_trans, b_trans, amax, fast, accum, tf32;
    int64_t m, n, k, lda, ldb, ldd;
    uint32_t al_a, al_b, al_d, al_bias;
    int64_t batch, stride_a, stride_b, stride_d;   /* batch 1 and strides 0 for a single GEMM */
};
struct KeyHash {
    size_t operator()(const Key &k) const {
        const unsigned char *p = (const unsigned char *)&k;
        uint64_t h = 1469598103934665603ull;
        for (size_t i = 0; i < sizeof k; i++) h = (h ^ p[i]) * 1099511628211ull;
        return (size_t)h;
    }
};
struct KeyEq {
    bool operator()(const Key &a, const Key &b) const { return memcmp(&a, &b, sizeof a) == 0; }
};

/* Configurations tried in order until cuBLASLt takes one: bias epilogue and AMAX_D in cuBLASLt, then
 * without AMAX_D, then without either (our kernel adds the bias and/or computes the amax). */
struct Plan {
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL, ld = NULL;
    cublasLtMatmulAlgo_t algo;
    int cfg = 0;
    bool lt_bias = false, lt_amax = false, verified = false;
};

struct Dev {
    cublasLtHandle_t h = NULL;
    void *ws = NULL;
    float *scales = NULL;   /* 3 slots, 16 bytes apart: aligned copies of scale pointers that are not */
    std::unordered_map<Key, Plan, KeyHash, KeyEq> plans;
};
std::unordered_map<int, Dev> devs;

void destroy(Plan &p) {
    if (lt_state <= 0) return;
    if (p.desc) lt.cublasLtMatmulDescDestroy(p.desc);
    if (p.la) lt.cublasLtMatrixLayoutDestroy(p.la);
    if (p.lb) lt.cublasLtMatrixLayoutDestroy(p.lb);
    if (p.lc) lt.cublasLtMatrixLayoutDestroy(p.lc);
    if (p.ld) lt.cublasLtMatrixLayoutDestroy(p.ld);
    p = Plan();
}

cudaDataType_t cuda_type(fl_dtype t) {
    switch (t) {
    case FL_F32: return CUDA_R_32F;
    case FL_BF16: return CUDA_R_16BF;
    case FL_F16: return CUDA_R_16F;
    case FL_E4M3: return CUDA_R_8F_E4M3;
    default: return CUDA_R_8F_E5M2;
    }
}

/* cuBLASLt's AMAX_D sees D before a bias that our kernel adds, so it is asked for only when cuBLASLt
 * also adds the bias (or there is none). */
bool amax_in_lt(const fl_cuda_gemm_args *g) { return g->d_amax && (!g->bias || lt_bias_ok(g)); }

/* The configurations a call may use, from the most fused. */
int max_cfg(const fl_cuda_gemm_args *g) { return is_fp8_dtype(g->d_dtype) ? 0 : 2; }
bool cfg_useful(const fl_cuda_gemm_args *g, int cfg) {
    if (cfg == 0) return true;
    if (cfg == 1) return amax_in_lt(g);                           /* differs from 0 only by dropping AMAX_D */
    return lt_bias_ok(g);                                         /* differs from 1 only by dropping the bias */
}

/* Descriptors and the heuristic's algorithm for configuration cfg. FL_EUNSUPPORTED: cuBLASLt has no
 * algorithm for it (the caller tries the next configuration). */
fl_status build_plan(Dev &d, const fl_cuda_gemm_args *g, int cfg, Plan *out, const char *ctx) {
    Plan p;
    p.cfg = cfg;
    const bool fp8 = fp8_gemm(g), d8 = is_fp8_dtype(g->d_dtype);
    p.lt_bias = lt_bias_ok(g) && cfg <= 1;
    p.lt_amax = amax_in_lt(g) && cfg == 0;
    cublasComputeType_t ct = (g->a_dtype == FL_F32 && g->tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasOperation_t ta = g->b_trans ? CUBLAS_OP_N : CUBLAS_OP_T;   /* cuBLASLt's A is our B */
    cublasOperation_t tb = g->a_trans ? CUBLAS_OP_T : CUBLAS_OP_N;   /* cuBLASLt's B is our A */
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    fl_status st = FL_OK;
#define TRY(call, what)                                                                           \
    do { cublasStatus_t lt__s = (call);                                                           \
         if (lt__s != CUBLAS_STATUS_SUCCESS) { st = lt_fail(lt__s, what, ctx, __FILE__, __LINE__); goto fail; } } while (0)
    TRY(lt.cublasLtMatmulDescCreate(&p.desc, ct, CUDA_R_32F), "cublasLtMatmulDescCreate");
    TRY(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
        "cublasLtMatmulDescSetAttribute(TRANSA)");
    TRY(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
        "cublasLtMatmulDescSetAttribute(TRANSB)");
    TRY(lt.cublasLtMatrixLayoutCreate(&p.la, cuda_type(g->b_dtype), g->b_trans ? g->n : g->k, g->b_trans ? g->k : g->n,
                                      g->ldb), "cublasLtMatrixLayoutCreate(B)");
    TRY(lt.cublasLtMatrixLayoutCreate(&p.lb, cuda_type(g->a_dtype), g->a_trans ? g->m : g->k, g->a_trans ? g->k : g->m,
                                      g->lda), "cublasLtMatrixLayoutCreate(A)");
    /* FP8 D: cuBLASLt wants C in the bias dtype (bf16, or fp16 beside fp16), and no C data. */
    TRY(lt.cublasLtMatrixLayoutCreate(&p.lc, d8 ? CUDA_R_16BF : cuda_type(g->d_dtype), g->n, g->m, g->ldd),
        "cublasLtMatrixLayoutCreate(C)");
    TRY(lt.cublasLtMatrixLayoutCreate(&p.ld, cuda_type(g->d_dtype), g->n, g->m, g->ldd), "cublasLtMatrixLayoutCreate(D)");
    if (batched(g)) {
        /* Every layout carries the batch count (cuBLASLt wants them equal); cuBLASLt's A is our B. */
        const int32_t bc = (int32_t)g->batch;
        const int64_t off[4] = { g->stride_b, g->stride_a, g->stride_d, g->stride_d };
        cublasLtMatrixLayout_t lays[4] = { p.la, p.lb, p.lc, p.ld };
        for (int i = 0; i < 4; i++) {
            TRY(lt.cublasLtMatrixLayoutSetAttribute(lays[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc),
                "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)");
            TRY(lt.cublasLtMatrixLayoutSetAttribute(lays[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &off[i],
                                                    sizeof off[i]), "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)");
        }
    }
    if (fp8) {
        int8_t fast = g->fast_accum ? 1 : 0;
        TRY(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast),
            "cublasLtMatmulDescSetAttribute(FAST_ACCUM)");
        /* Pointer attributes are set again on every call; these first values let the heuristic see them. */
        const void *sa = g->b_scale_inv, *sb = g->a_scale_inv;
        TRY(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa),
            "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)");
        TRY(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb),
            "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)");
        if (d8) {
            const void *sd = g->d_scale;
            TRY(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &sd, sizeof sd),
                "cublasLtMatmulDescSetAttribute(D_SCALE_POINTER)");
        }
    }
    if (p.lt_amax) {
        void *am = g->d_amax;
        TRY(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &am, sizeof am),
            "cublasLtMatmulDescSetAttribute(AMAX_D_POINTER)");
    }
    {
        cublasLtEpilogue_t epi = p.lt_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
        TRY(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
            "cublasLtMatmulDescSetAttribute(EPILOGUE)");
        if (p.lt_bias) {
            const void *bp = g->bias;
            TRY(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp),
                "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
            if (fp8) {
                cudaDataType_t bt = cuda_type(g->bias_dtype);
                TRY(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
                    "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)");
            }
        }
    }
    {
        uint64_t ws = kWorkspace;
        uint32_t al_a = align_b(g), al_b = align_a(g), al_d = align_d(g);   /* cuBLASLt's A is our B */
        TRY(lt.cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
        TRY(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
            "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
        TRY(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a),
            "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_A_BYTES)");
        TRY(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b),
            "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_B_BYTES)");
        TRY(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d),
            "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_C_BYTES)");
        TRY(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d),
            "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_D_BYTES)");
        heuristic_calls++;
        cublasStatus_t hs = lt.cublasLtMatmulAlgoGetHeuristic(d.h, p.desc, p.la, p.lb, p.lc, p.ld, pref, 1, &res, &nres);
        if (hs == CUBLAS_STATUS_SUCCESS && nres == 0) hs = CUBLAS_STATUS_NOT_SUPPORTED;
        if (hs == CUBLAS_STATUS_INVALID_VALUE && cfg < max_cfg(g)) {
            /* an epilogue or AMAX_D this cuBLASLt rejects for these types: the next configuration drops it */
            (void)lt_fail(hs, "cublasLtMatmulAlgoGetHeuristic", ctx, __FILE__, __LINE__);
            st = FL_EUNSUPPORTED;
            goto fail;
        }
        TRY(hs, "cublasLtMatmulAlgoGetHeuristic");
    }
#undef TRY
    lt.cublasLtMatmulPreferenceDestroy(pref);
    p.algo = res.algo;
    *out = p;
    return FL_OK;
fail:
    if (pref) lt.cublasLtMatmulPreferenceDestroy(pref);
    destroy(p);
    return st;
}

/* ---- the bias / amax pass when cuBLASLt does not do them ---------------------------------------------- */

template <int DT>
__global__ void __launch_bounds__(kThreads) gemm_epilogue_kernel(void *d, int64_t m, int64_t n, int64_t ldd,
                                                                 const void *bias, int bias_dt, float *amax) {
    unsigned mx = 0;
    const int64_t total = m * n;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / n, c = i % n, at = r * ldd + c;
        float x;
        if (DT == FL_F32) x = static_cast<float *>(d)[at];
        else if (DT == FL_BF16) x = fl_bf16_bits_to_f32(static_cast<uint16_t *>(d)[at]);
        else x = fl_f16_bits_to_f32(static_cast<uint16_t *>(d)[at]);
        if (bias) {
            float b = bias_dt == FL_F32 ? static_cast<const float *>(bias)[c]
                    : bias_dt == FL_BF16 ? fl_bf16_bits_to_f32(static_cast<const uint16_t *>(bias)[c])
                                         : fl_f16_bits_to_f32(static_cast<const uint16_t *>(bias)[c]);
            x = fl_fadd(x, b);
            if (DT == FL_F32) static_cast<float *>(d)[at] = x;
            else if (DT == FL_BF16) {
                uint16_t h = fl_f32_to_bf16_bits(x);
                static_cast<uint16_t *>(d)[at] = h;
                x = fl_bf16_bits_to_f32(h);
            } else {
                uint16_t h = fl_f32_to_f16_bits(x);
                static_cast<uint16_t *>(d)[at] = h;
                x = fl_f16_bits_to_f32(h);
            }
        }
        unsigned u = __float_as_uint(fabsf(x));                   /* NaN bits exceed every number's */
        mx = u > mx ? u : mx;
    }
    if (amax) {
        mx = __reduce_max_sync(0xffffffffu, mx);
        if ((threadIdx.x & 31) == 0 && mx) atomicMax(reinterpret_cast<unsigned *>(amax), mx);
    }
}

fl_status run_epilogue(const fl_cuda_gemm_args *g, bool add_bias, bool want_amax, cudaStream_t st, const char *ctx) {
    float *amax = want_amax ? g->d_amax : NULL;
    const void *bias = add_bias ? g->bias : NULL;
    if (!amax && !bias) return FL_OK;
    if (amax) CU_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), st), "cudaMemsetAsync (amax)");
    unsigned grid = grid_for_work((size_t)(g->m * g->n), kThreads, 8);
#define FL_EPI(DT) gemm_epilogue_kernel<DT><<<grid, kThreads, 0, st>>>(g->d, g->m, g->n, g->ldd, bias, g->bias_dtype, amax)
    if (g->d_dtype == FL_F32) FL_EPI(FL_F32);
    else if (g->d_dtype == FL_BF16) FL_EPI(FL_BF16);
    else FL_EPI(FL_F16);
#undef FL_EPI
    CU_CHECK(cudaGetLastError(), "gemm_epilogue_kernel launch");
    return FL_OK;
}

/* *p, when it is not 16-byte aligned, replaced by an aligned device copy of the float it points to (slot 0..2). */
fl_status aligned_scale(Dev &d, const void **p, int slot, cudaStream_t st, const char *ctx) {
    if (!*p || ((uintptr_t)*p & 15u) == 0) return FL_OK;
    if (!d.scales) CU_CHECK(cudaMalloc(&d.scales, 3 * 16), "cudaMalloc (aligned GEMM scales)");
    float *dst = d.scales + 4 * slot;
    CU_CHECK(cudaMemcpyAsync(dst, *p, sizeof(float), cudaMemcpyDeviceToDevice, st), "cudaMemcpyAsync (GEMM scale)");
    *p = dst;
    return FL_OK;
}

}  // namespace

extern "C" size_t fl_cuda_gemm_heuristic_calls(void) {
    std::lock_guard<std::mutex> lock(mu);
    return heuristic_calls;
}

extern "C" fl_status fl_cuda_gemm(const fl_cuda_gemm_args *g, fl_cuda_stream_t stream) {
    FL_TRY(check_args(g));
    char ctx[200];
    snprintf(ctx, sizeof ctx, "cuda gemm %s x %s -> %s [m=%lld n=%lld k=%lld]", dtn(g->a_dtype), dtn(g->b_dtype),
             dtn(g->d_dtype), (long long)g->m, (long long)g->n, (long long)g->k);
    cudaStream_t st = pick_stream(stream);
    if (g->m == 0 || g->n == 0) {
        if (g->d_amax) CU_CHECK(cudaMemsetAsync(g->d_amax, 0, sizeof(float), st), "cudaMemsetAsync (amax)");
        return FL_OK;
    }
    std::lock_guard<std::mutex> lock(mu);
    FL_TRY(load_lt_locked());
    int dev = 0;
    CU_CHECK(cudaGetDevice(&dev), "cudaGetDevice");
    Dev &d = devs[dev];
    if (!d.h) LT_CHECK(lt.cublasLtCreate(&d.h), "cublasLtCreate");
    if (!d.ws) CU_CHECK(cudaMalloc(&d.ws, kWorkspace), "cudaMalloc (cuBLASLt workspace, 32 MiB)");

    Key key;
    memset(&key, 0, sizeof key);
    key.adt = g->a_dtype; key.bdt = g->b_dtype; key.ddt = g->d_dtype; key.biasdt = g->bias ? (int32_t)g->bias_dtype : -1;
    key.a_trans = g->a_trans; key.b_trans = g->b_trans; key.amax = g->d_amax != NULL; key.fast = g->fast_accum;
    key.accum = g->accumulate; key.tf32 = g->tf32 && g->a_dtype == FL_F32;
    key.m = g->m; key.n = g->n; key.k = g->k; key.lda = g->lda; key.ldb = g->ldb; key.ldd = g->ldd;
    key.al_a = align_a(g); key.al_b = align_b(g); key.al_d = align_d(g);
    key.al_bias = g->bias ? alignment_of(g->bias) : 0;
    key.batch = batched(g) ? g->batch : 1;
    if (batched(g)) { key.stride_a = g->stride_a; key.stride_b = g->stride_b; key.stride_d = g->stride_d; }

    auto it = d.plans.find(key);
    int cfg = it == d.plans.end() ? 0 : it->second.cfg;
    const float one = 1.0f, beta = g->accumulate ? 1.0f : 0.0f;
    for (;; cfg++) {
        if (it == d.plans.end()) {
            while (cfg <= max_cfg(g) && !cfg_useful(g, cfg)) cfg++;
            if (cfg > max_cfg(g)) return FL_EUNSUPPORTED;         /* the last failure's message stands */
            Plan p;
            fl_status bs = build_plan(d, g, cfg, &p, ctx);
            if (bs == FL_EUNSUPPORTED && cfg < max_cfg(g)) continue;
            FL_TRY(bs);
            it = d.plans.emplace(key, p).first;
        }
        Plan &p = it->second;
        /* This call's pointers (the cached descriptor holds the previous call's). cuBLASLt refuses at run time
         * (CUBLAS_STATUS_NOT_SUPPORTED, seen on an H100 with cuBLASLt 13) a scale pointer that is not 16-byte
         * aligned, such as the second float of an array: such a scale is first copied to an aligned slot, in
         * stream order, so a later call cannot overwrite it before this GEMM has read it. */
        if (fp8_gemm(g)) {
            const void *sa = g->b_scale_inv, *sb = g->a_scale_inv;
            FL_TRY(aligned_scale(d, &sa, 0, st, ctx));
            FL_TRY(aligned_scale(d, &sb, 1, st, ctx));
            LT_CHECK(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa),
                     "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)");
            LT_CHECK(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb),
                     "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)");
            if (is_fp8_dtype(g->d_dtype)) {
                const void *sd = g->d_scale;
                FL_TRY(aligned_scale(d, &sd, 2, st, ctx));
                LT_CHECK(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &sd, sizeof sd),
                         "cublasLtMatmulDescSetAttribute(D_SCALE_POINTER)");
            }
        }
        if (p.lt_amax) {
            void *am = g->d_amax;
            LT_CHECK(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &am, sizeof am),
                     "cublasLtMatmulDescSetAttribute(AMAX_D_POINTER)");
        }
        if (p.lt_bias) {
            const void *bp = g->bias;
            LT_CHECK(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp),
                     "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
        }
        const void *c = is_fp8_dtype(g->d_dtype) ? NULL : g->d;
        cublasStatus_t ms = lt.cublasLtMatmul(d.h, p.desc, &one, g->b, p.la, g->a, p.lb, &beta, c, p.lc, g->d, p.ld,
                                              &p.algo, d.ws, kWorkspace, st);
        if (ms != CUBLAS_STATUS_SUCCESS && !p.verified && p.cfg < max_cfg(g) &&
            (ms == CUBLAS_STATUS_NOT_SUPPORTED || ms == CUBLAS_STATUS_INVALID_VALUE)) {
            /* This cuBLASLt takes the plan's bias epilogue or AMAX_D at the heuristic but not at run
             * time: drop them (our epilogue kernel does that part) and try again. */
            (void)lt_fail(ms, "cublasLtMatmul", ctx, __FILE__, __LINE__);   /* stands if nothing else works */
            cfg = p.cfg;
            destroy(p);
            d.plans.erase(it);
            it = d.plans.end();
            continue;
        }
        LT_CHECK(ms, "cublasLtMatmul");
        p.verified = true;
        CU_CHECK(cudaGetLastError(), "cublasLtMatmul launch");
        return run_epilogue(g, g->bias && !p.lt_bias, g->d_amax && !p.lt_amax, st, ctx);
    }
}

#else  /* no cublasLt.h where this was built: the checks still run, the GEMMs say why they cannot */

extern "C" size_t fl_cuda_gemm_heuristic_calls(void) { return 0; }

extern "C" fl_status fl_cuda_gemm(const fl_cuda_gemm_args *g, fl_cuda_stream_t stream) {
    (void)stream;
    FL_TRY(check_args(g));
    return FL_ERR(FL_EUNSUPPORTED, "cuda gemm: fp8lab was built without cuBLASLt's header (cublasLt.h)");
}

#endif
