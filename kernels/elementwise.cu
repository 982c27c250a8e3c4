/* elementwise.cu — the CUDA device's strided copy (with fp32/bf16/fp16 conversion), fill, broadcast binary
 * ops, tensor-scalar ops and unary ops (core/device.h), reproducing core/cpu/cpu_device.c and
 * core/cpu/cpu_elementwise.c.
 * Maths: each element is decoded to fp32 (bf16/fp16 exactly, FP8 codes without their scale, as the CPU's
 * fl_cpu_load does), combined with one separately rounded fp32 operation — a op b; a op s or s op a with
 * the double scalar first rounded to fp32 — and stored rounded to nearest even (FP8 saturating), the
 * CPU's arithmetic bit for bit (exp and log too: cpu_vmath.h's fp32 code, ported operation by operation);
 * abs and neg clear / flip the sign bit as x86 does. Same-dtype copies move
 * the bytes (FP8 codes, NaN payloads unchanged). bf16/fp16 codecs are core/format.c's (NaN included).
 * Layouts: dims are coalesced exactly as the CPU's tile walker does (size-1 dims dropped, neighbours
 * contiguous in every tensor merged). All-contiguous work is a flat grid-stride loop, 4 elements per
 * vector access when every pointer allows (a same-dtype contiguous copy is one cudaMemcpyAsync);
 * anything else (broadcast stride 0, transposed, sliced, a non-contiguous dst) is one element per
 * thread, its offsets decoded from the coalesced shape (32-bit index arithmetic when n < 2^31, 64-bit
 * offsets always). Every element is written by one thread: deterministic.
 * Tolerance: bit-exact with the CPU except NaN payloads (GPU arithmetic returns a canonical NaN);
 * tests/c/test_gpu_ops.c. The per-element code is
 * __host__ __device__; the fl_cuda_*_host functions at the end run the same plans and loops on host
 * memory so the tests check them without a GPU. */
#include "cuda_common.cuh"
#include "fl_cuda_host.h"
#include "cuda_entries.h"
#include "hypot1.h"
#include <stdlib.h>
#include <string.h>

namespace {

constexpr int kThreads = 256;
constexpr int kVec = 4;     /* elements per vector access in the flat loop */
constexpr int kMaxT = 3;    /* tensors of one op: dst, a, b */

enum Kind { K_COPY_BYTES = 0, K_CONVERT, K_BINARY, K_SCALAR, K_UNARY };

#if defined(__CUDA_ARCH__)
#define EW_UNROLL _Pragma("unroll")
#else
#define EW_UNROLL   /* the host compiler has no such pragma */
#endif

/* ---- element codecs, bit-exact with core/format.c ------------------------------------------------ */

/* bf16/fp16 codecs: core/half_cvt.h (the host's, bit for bit). */

template <int D> struct Codec;
template <> struct Codec<FL_F32> {
    typedef float T;
    static FL_HD float dec(T v) { return v; }
    static FL_HD T enc(float x) { return x; }
};
template <> struct Codec<FL_BF16> {
    typedef uint16_t T;
    static FL_HD float dec(T v) { return fl_bf16_bits_to_f32(v); }
    static FL_HD T enc(float x) { return fl_f32_to_bf16_bits(x); }
};
template <> struct Codec<FL_F16> {
    typedef uint16_t T;
    static FL_HD float dec(T v) { return fl_f16_bits_to_f32(v); }
    static FL_HD T enc(float x) { return fl_f32_to_f16_bits(x); }
};

FL_HD uint8_t ew_f32_to_fp8(float x, int dt) {
    bool over;
    return dt == FL_E4M3 ? fl_cvt_fp8<3, 7>(x, false, &over) : fl_cvt_fp8<2, 15>(x, false, &over);
}

/* Element `off` of a tensor of any dtype, as fp32 (the CPU's fl_cpu_load). */
FL_HD float ew_load(const char *base, int dt, int64_t off) {
    switch (dt) {
    case FL_F32: return reinterpret_cast<const float *>(base)[off];
    case FL_BF16: return fl_bf16_bits_to_f32(reinterpret_cast<const uint16_t *>(base)[off]);
    case FL_F16: return fl_f16_bits_to_f32(reinterpret_cast<const uint16_t *>(base)[off]);
    case FL_E4M3: return fl_dec_fp8<3, 7>(reinterpret_cast<const uint8_t *>(base)[off]);
    default: return fl_dec_fp8<2, 15>(reinterpret_cast<const uint8_t *>(base)[off]);
    }
}

/* Store fp32 as any dtype (the CPU's fl_cpu_store: RNE, FP8 saturating, no scale). */
FL_HD void ew_store(char *base, int dt, int64_t off, float v) {
    switch (dt) {
    case FL_F32: reinterpret_cast<float *>(base)[off] = v; break;
    case FL_BF16: reinterpret_cast<uint16_t *>(base)[off] = fl_f32_to_bf16_bits(v); break;
    case FL_F16: reinterpret_cast<uint16_t *>(base)[off] = fl_f32_to_f16_bits(v); break;
    default: reinterpret_cast<uint8_t *>(base)[off] = ew_f32_to_fp8(v, dt); break;
    }
}

/* ---- the arithmetic of core/cpu/cpu_elementwise.c (same operand order) --------------------------- */

FL_HD float ew_maximum(float x, float y) {
    if (x != x || y != y) return fl_fadd(x, y);          /* NaN in, NaN out */
    return x > y || (x == y && !signbit(x)) ? x : y;     /* -0 < +0 */
}
FL_HD float ew_minimum(float x, float y) {
    if (x != x || y != y) return fl_fadd(x, y);
    return x < y || (x == y && signbit(x)) ? x : y;
}
FL_HD float ew_pow(float x, float y) { return (float)pow((double)x, (double)y); }
FL_HD float ew_cmp(bool c) { return c ? 1.0f : 0.0f; }
FL_HD float ew_remainder(float x, float y) {   /* torch's: fmod moved by y where the signs differ */
    float m = fmodf(x, y);
    return m != 0.0f && ((y < 0.0f) != (m < 0.0f)) ? m + y : m;
}

FL_HD float ew_binop(int op, float x, float y) {
    switch (op) {
    case FL_OP_ADD: return fl_fadd(x, y);
    case FL_OP_SUB: return fl_fsub(x, y);
    case FL_OP_MUL: return fl_fmul(x, y);
    case FL_OP_DIV: return fl_fdiv(x, y);
    case FL_OP_MAXIMUM: return ew_maximum(x, y);
    case FL_OP_MINIMUM: return ew_minimum(x, y);
    case FL_OP_POW: return ew_pow(x, y);
    case FL_OP_WHERE: return x != 0.0f ? y : -0.0f;
    case FL_OP_EQ: return ew_cmp(x == y);
    case FL_OP_NE: return ew_cmp(x != y);
    case FL_OP_LT: return ew_cmp(x < y);
    case FL_OP_LE: return ew_cmp(x <= y);
    case FL_OP_GT: return ew_cmp(x > y);
    case FL_OP_ATAN2: return (float)atan2((double)x, (double)y);
    case FL_OP_FMOD: return fmodf(x, y);
    case FL_OP_REMAINDER: return ew_remainder(x, y);
    case FL_OP_HYPOT: return fl_hypot1(x, y);   /* the CPU's definition (core/hypot1.h), correctly rounded */
    default: return ew_cmp(x >= y);   /* FL_OP_GE */
    }
}

/* s op x when first, else x op s: the binary op with its operands in that order; the scalar as the double it was
 * given for pow (a double power rounded once, as the CPU computes it), in fp32 for the others. x^0.5 and x^-0.5 are
 * the CPU's shortcuts (core/cpu/cpu_elementwise.c, pow_by_scalar): torch's sqrt and rsqrt, −0 and NaN at −0 and −inf
 * for x^0.5, −inf and NaN for x^-0.5 (pow's +0, +inf, +inf, +0 until stop 98), every other x pow's bits. */
FL_HD float ew_scalar(int op, float x, double s, bool first) {
    if (op == FL_OP_POW && !first && s == 0.5) return (float)sqrt((double)x);
    if (op == FL_OP_POW && !first && s == -0.5) return (float)(1.0 / sqrt((double)x));
    if (op == FL_OP_POW) return first ? (float)pow(s, (double)x) : (float)pow((double)x, s);
    return first ? ew_binop(op, (float)s, x) : ew_binop(op, x, (float)s);
}

FL_HD float ew_unop(int op, float x) {
    switch (op) {
    case FL_OP_ABS: return fl_u2f(fl_f2u(x) & 0x7fffffffu);
    case FL_OP_NEG: return fl_u2f(fl_f2u(x) ^ 0x80000000u);
    case FL_OP_EXP: return fl_cu_vm_exp(x);           /* cpu_vmath.h's, bit for bit */
    case FL_OP_LOG: return fl_cu_vm_log(x);
    case FL_OP_SIGN: return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x;
    case FL_OP_TANH: return fl_cu_vm_tanh(x);         /* cpu_vmath.h's, bit for bit */
    case FL_OP_SIGMOID: return fl_cu_vm_sigmoid(x);
    case FL_OP_SIN: return (float)sin((double)x);
    case FL_OP_COS: return (float)cos((double)x);
    case FL_OP_FLOOR: return floorf(x);
    case FL_OP_CEIL: return ceilf(x);
    case FL_OP_ROUND: return rintf(x);   /* half to even */
    case FL_OP_TRUNC: return truncf(x);
    case FL_OP_ERF: return (float)erf((double)x);
    case FL_OP_LOG1P: return (float)log1p((double)x);
    case FL_OP_EXPM1: return (float)expm1((double)x);
    case FL_OP_TAN: return (float)tan((double)x);
    case FL_OP_ASIN: return (float)asin((double)x);
    case FL_OP_ACOS: return (float)acos((double)x);
    case FL_OP_ATAN: return (float)atan((double)x);
    case FL_OP_SINH: return (float)sinh((double)x);
    case FL_OP_COSH: return (float)cosh((double)x);
    case FL_OP_LOG2: return (float)log2((double)x);
    case FL_OP_LOG10: return (float)log10((double)x);
    case FL_OP_EXP2: return (float)exp2((double)x);
    case FL_OP_RSQRT: return 1.0f / fl_fsqrt(x);   /* the CPU's two roundings (fl_fsqrt: IEEE's √) */
    default: return fl_fsqrt(x);
    }
}

struct EwOp {
    int kind, op;
    double s;       /* K_SCALAR: the scalar (rounded to fp32 where the CPU rounds it: ew_scalar) */
    int first;      /* K_SCALAR: s op a */
    int es;         /* K_COPY_BYTES: element size */
};

FL_HD float ew_apply(const EwOp &o, float x, float y) {
    switch (o.kind) {
    case K_BINARY: return ew_binop(o.op, x, y);
    case K_SCALAR: return ew_scalar(o.op, x, o.s, o.first != 0);
    case K_UNARY: return ew_unop(o.op, x);
    default: return x;   /* K_CONVERT */
    }
}

/* ---- layout ------------------------------------------------------------------------------------- */

/* The coalesced iteration space: nd dims (outermost first), each tensor's element strides, element 0
 * of each tensor (dst first). Unused tensors have stride 0. */
struct EwPlan {
    int nt, nd;
    int64_t n;
    int64_t size[FL_MAX_DIMS];
    int64_t stride[kMaxT][FL_MAX_DIMS];
    char *base[kMaxT];
    int dt[kMaxT];
};

/* fl_cpu_for_tiles' coalescing, over dst's shape (every tensor has exactly that shape). */
void ew_plan(EwPlan *p, int nt, const fl_tensor *const *ts) {
    memset(p, 0, sizeof *p);
    p->nt = nt;
    for (int k = 0; k < nt; k++) {
        p->base[k] = (char *)fl_tensor_data(ts[k]);
        p->dt[k] = ts[k]->dtype;
    }
    const fl_tensor *d = ts[0];
    int nd = 0;
    int64_t n = 1;
    for (int dim = 0; dim < d->ndim; dim++) {
        const int64_t s = d->shape[dim];
        if (s == 0) { p->n = 0; p->nd = 1; p->size[0] = 0; return; }
        n *= s;
        if (s == 1) continue;
        bool merge = nd > 0;
        for (int k = 0; k < nt && merge; k++) merge = p->stride[k][nd - 1] == ts[k]->stride[dim] * s;
        if (merge) {
            p->size[nd - 1] *= s;
            for (int k = 0; k < nt; k++) p->stride[k][nd - 1] = ts[k]->stride[dim];
        } else {
            p->size[nd] = s;
            for (int k = 0; k < nt; k++) p->stride[k][nd] = ts[k]->stride[dim];
            nd++;
        }
    }
    if (nd == 0) {   /* one element */
        nd = 1;
        p->size[0] = 1;
        for (int k = 0; k < nt; k++) p->stride[k][0] = 1;
    }
    p->nd = nd;
    p->n = n;
}

bool ew_is_flat(const EwPlan &p) {
    if (p.nd != 1) return false;
    for (int k = 0; k < p.nt; k++)
        if (p.stride[k][0] != 1) return false;
    return true;
}

/* Offsets of element i (row-major over the coalesced dims). */
template <typename I>
FL_HD void ew_offsets(const EwPlan &p, I i, int64_t off[kMaxT]) {
    off[0] = off[1] = off[2] = 0;
EW_UNROLL
    for (int d = FL_MAX_DIMS - 1; d >= 0; d--) {
        if (d >= p.nd) continue;
        I c;
        if (d == 0) c = i;
        else {
            const I sz = (I)p.size[d];
            c = i % sz;
            i /= sz;
        }
        off[0] += (int64_t)c * p.stride[0][d];
        off[1] += (int64_t)c * p.stride[1][d];
        off[2] += (int64_t)c * p.stride[2][d];
    }
}

/* ---- the loops (a kernel runs them with its grid-stride position; the host with tid 0, nthr 1) -- */

template <typename I>
FL_HD void ew_generic_loop(const EwPlan &p, const EwOp &o, I tid, I nthr) {
    const I n = (I)p.n;
    for (I i = tid; i < n; i += nthr) {
        int64_t off[kMaxT];
        ew_offsets<I>(p, i, off);
        if (o.kind == K_COPY_BYTES) {
            if (o.es == 1) reinterpret_cast<uint8_t *>(p.base[0])[off[0]] = reinterpret_cast<const uint8_t *>(p.base[1])[off[1]];
            else if (o.es == 2) reinterpret_cast<uint16_t *>(p.base[0])[off[0]] = reinterpret_cast<const uint16_t *>(p.base[1])[off[1]];
            else reinterpret_cast<uint32_t *>(p.base[0])[off[0]] = reinterpret_cast<const uint32_t *>(p.base[1])[off[1]];
            continue;
        }
        const float x = ew_load(p.base[1], p.dt[1], off[1]);
        const float y = o.kind == K_BINARY ? ew_load(p.base[2], p.dt[2], off[2]) : 0.0f;
        ew_store(p.base[0], p.dt[0], off[0], ew_apply(o, x, y));
    }
}

template <typename T> struct alignas(sizeof(T) * kVec) VecT { T v[kVec]; };

template <typename T> FL_HD VecT<T> vload(const char *base, int64_t v) {
#if defined(__CUDA_ARCH__)
    return reinterpret_cast<const VecT<T> *>(base)[v];
#else
    VecT<T> r;
    memcpy(&r, base + v * (int64_t)sizeof(VecT<T>), sizeof r);
    return r;
#endif
}
template <typename T> FL_HD void vstore(char *base, int64_t v, const VecT<T> &x) {
#if defined(__CUDA_ARCH__)
    reinterpret_cast<VecT<T> *>(base)[v] = x;
#else
    memcpy(base + v * (int64_t)sizeof(VecT<T>), &x, sizeof x);
#endif
}

/* The flat loop's op: ew_apply where dst and sources share a dtype; with two dtypes the flat loop only converts
 * (ew_run sends any other op whose dst dtype is not its sources' to the generic loop; the core never asks for one:
 * fl_binary_raw's result is its operands' promoted dtype, fl_binary_scalar_raw's and fl_unary_raw's the operand's).
 * So the six conversions' kernels hold no op code: each of the nine kept every op (exp, erf, atan2, ...) for every
 * architecture, a third of this file's compile time. */
template <int DD, int DS> FL_HD float ew_flat_apply(const EwOp &o, float x, float y) {
    if constexpr (DD == DS) return ew_apply(o, x, y);
    else return x;   /* K_CONVERT */
}

/* Contiguous dst of dtype DD from contiguous sources of dtype DS; vec: every pointer is aligned to
 * kVec elements, so elements [kVec·v, kVec·v + kVec) move as one access. */
template <int DD, int DS>
FL_HD void ew_flat_loop(const EwPlan &p, const EwOp &o, bool vec, int64_t tid, int64_t nthr) {
    typedef Codec<DD> CD;
    typedef Codec<DS> CS;
    typedef typename CD::T TD;
    typedef typename CS::T TS;
    const bool two = o.kind == K_BINARY;
    int64_t done = 0;
    if (vec) {
        const int64_t nv = p.n / kVec;
        for (int64_t v = tid; v < nv; v += nthr) {
            const VecT<TS> a = vload<TS>(p.base[1], v);
            const VecT<TS> b = two ? vload<TS>(p.base[2], v) : a;
            VecT<TD> r;
EW_UNROLL
            for (int k = 0; k < kVec; k++) r.v[k] = CD::enc(ew_flat_apply<DD, DS>(o, CS::dec(a.v[k]), CS::dec(b.v[k])));
            vstore<TD>(p.base[0], v, r);
        }
        done = nv * kVec;
    }
    const TS *a = reinterpret_cast<const TS *>(p.base[1]), *b = reinterpret_cast<const TS *>(p.base[2]);
    TD *d = reinterpret_cast<TD *>(p.base[0]);
    for (int64_t i = done + tid; i < p.n; i += nthr)
        d[i] = CD::enc(ew_flat_apply<DD, DS>(o, CS::dec(a[i]), two ? CS::dec(b[i]) : 0.0f));
}

template <typename I>
__global__ void __launch_bounds__(kThreads) ew_generic_kernel(const __grid_constant__ EwPlan p, const EwOp o) {
    ew_generic_loop<I>(p, o, (I)(blockIdx.x * blockDim.x + threadIdx.x), (I)(gridDim.x * blockDim.x));
}

template <int DD, int DS>
__global__ void __launch_bounds__(kThreads) ew_flat_kernel(const __grid_constant__ EwPlan p, const EwOp o, bool vec) {
    ew_flat_loop<DD, DS>(p, o, vec, (int64_t)blockIdx.x * blockDim.x + threadIdx.x, (int64_t)gridDim.x * blockDim.x);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) fill_kernel(T *p, T v, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        p[i] = v;
}

/* ---- launching (or running on the host) ------------------------------------------------------------ */

template <int DD, int DS>
fl_status run_flat(const EwPlan &p, const EwOp &o, bool vec, bool host) {
    if (host) {
        ew_flat_loop<DD, DS>(p, o, vec, 0, 1);
        return FL_OK;
    }
    const size_t work = vec ? (size_t)(p.n / kVec) + 1 : (size_t)p.n;
    ew_flat_kernel<DD, DS><<<grid_for_work(work, kThreads, 8), kThreads, 0, fl_cuda_stream()>>>(p, o, vec);
    FL_CUDA_CHECK(cudaGetLastError(), "ew_flat_kernel launch");
    return FL_OK;
}

template <int DD>
fl_status run_flat_src(int ds, const EwPlan &p, const EwOp &o, bool vec, bool host) {
    if (ds == FL_F32) return run_flat<DD, FL_F32>(p, o, vec, host);
    if (ds == FL_BF16) return run_flat<DD, FL_BF16>(p, o, vec, host);
    return run_flat<DD, FL_F16>(p, o, vec, host);
}

template <typename I>
fl_status run_generic(const EwPlan &p, const EwOp &o, bool host) {
    if (host) {
        ew_generic_loop<I>(p, o, (I)0, (I)1);
        return FL_OK;
    }
    ew_generic_kernel<I><<<grid_for_work((size_t)p.n, kThreads, 8), kThreads, 0, fl_cuda_stream()>>>(p, o);
    FL_CUDA_CHECK(cudaGetLastError(), "ew_generic_kernel launch");
    return FL_OK;
}

bool hp(int dt) { return dt == FL_F32 || dt == FL_BF16 || dt == FL_F16; }
bool aligned_to(const void *ptr, size_t a) { return ((uintptr_t)ptr % a) == 0; }

fl_status ew_run(const EwPlan &p, const EwOp &o, bool host) {
    if (p.n <= 0) return FL_OK;
    const bool flat = ew_is_flat(p);
    if (o.kind == K_COPY_BYTES && flat) {
        if (p.base[0] == p.base[1]) return FL_OK;
        const size_t bytes = (size_t)p.n * (size_t)o.es;
        if (host) memmove(p.base[0], p.base[1], bytes);
        else FL_CUDA_CHECK(cudaMemcpyAsync(p.base[0], p.base[1], bytes, cudaMemcpyDeviceToDevice, fl_cuda_stream()),
                           "cudaMemcpyAsync (copy)");
        return FL_OK;
    }
    const int nsrc = o.kind == K_BINARY ? 2 : 1;
    /* a conversion flat from any of fp32/bf16/fp16 to another; an op flat where every tensor has one such dtype */
    bool flat_ok = flat && o.kind != K_COPY_BYTES && hp(p.dt[0]) && hp(p.dt[1]) && (nsrc == 1 || p.dt[2] == p.dt[1])
                   && (o.kind == K_CONVERT || p.dt[0] == p.dt[1]);
    if (flat_ok) {
        bool vec = true;
        for (int k = 0; k <= nsrc; k++)
            vec = vec && aligned_to(p.base[k], (size_t)kVec * fl_format((fl_dtype)p.dt[k])->size);
        if (p.dt[0] == FL_F32) return run_flat_src<FL_F32>(p.dt[1], p, o, vec, host);
        if (p.dt[0] == FL_BF16) return run_flat_src<FL_BF16>(p.dt[1], p, o, vec, host);
        return run_flat_src<FL_F16>(p.dt[1], p, o, vec, host);
    }
    if (p.n <= (int64_t)INT32_MAX) return run_generic<uint32_t>(p, o, host);
    return run_generic<int64_t>(p, o, host);
}

/* ---- argument checks (before any CUDA call) --------------------------------------------------------- */

const char *dname(int dt) { return fl_format((fl_dtype)dt) ? fl_format((fl_dtype)dt)->name : "?"; }
bool is_fp8(int dt) { return dt == FL_E4M3 || dt == FL_E5M2; }

fl_status check_same_shape(const fl_tensor *dst, const fl_tensor *t, const char *op, const char *role) {
    if (fl_shape_equal(dst->ndim, dst->shape, t->ndim, t->shape)) return FL_OK;
    char a[200], b[200];
    return FL_ERR(FL_EINVAL, "%s on cuda: %s has shape %s, the destination %s (broadcast views come from core/ops.c)",
                  op, role, fl_shape_str(a, sizeof a, t->ndim, t->shape), fl_shape_str(b, sizeof b, dst->ndim, dst->shape));
}

fl_status copy_impl(fl_tensor *dst, const fl_tensor *src, bool host) {
    FL_TRY(fl_cu_check_tensor(dst, host, "copy", "destination"));
    FL_TRY(fl_cu_check_tensor(src, host, "copy", "source"));
    FL_TRY(check_same_shape(dst, src, "copy", "the source"));
    if (dst->dtype != src->dtype && (is_fp8(dst->dtype) || is_fp8(src->dtype)))
        return FL_ERR(FL_EINVAL, "copy: %s to %s needs quantize/dequantize", dname(src->dtype), dname(dst->dtype));
    EwPlan p;
    const fl_tensor *ts[2] = { dst, src };
    ew_plan(&p, 2, ts);
    EwOp o = { dst->dtype == src->dtype ? K_COPY_BYTES : K_CONVERT, 0, 0.0f, 0, (int)fl_format(dst->dtype)->size };
    return ew_run(p, o, host);
}

fl_status fill_impl(fl_tensor *dst, double value, bool host) {
    FL_TRY(fl_cu_check_tensor(dst, host, "fill", "destination"));
    if (!fl_tensor_is_contiguous(dst)) return FL_ERR(FL_EINVAL, "fill on cuda: expected a contiguous destination");
    const int64_t n = fl_tensor_numel(dst);
    if (n == 0) return FL_OK;
    const float f = (float)value;
    uint32_t bits;
    switch (dst->dtype) {
    case FL_F32: bits = fl_f2u(f); break;
    case FL_BF16: bits = fl_f32_to_bf16_bits(f); break;
    case FL_F16: bits = fl_f32_to_f16_bits(f); break;
    default: bits = ew_f32_to_fp8(f, dst->dtype); break;   /* saturating, as the CPU's fill */
    }
    const size_t es = fl_format(dst->dtype)->size;
    void *d = fl_tensor_data(dst);
    if (host) {
        for (int64_t i = 0; i < n; i++) {
            if (es == 4) static_cast<uint32_t *>(d)[i] = bits;
            else if (es == 2) static_cast<uint16_t *>(d)[i] = (uint16_t)bits;
            else static_cast<uint8_t *>(d)[i] = (uint8_t)bits;
        }
        return FL_OK;
    }
    cudaStream_t st = fl_cuda_stream();
    if (es == 1 || bits == 0) {
        FL_CUDA_CHECK(cudaMemsetAsync(d, (int)(bits & 0xffu), (size_t)n * es, st), "cudaMemsetAsync (fill)");
        return FL_OK;
    }
    const unsigned grid = grid_for_work((size_t)n, kThreads, 8);
    if (es == 4) fill_kernel<uint32_t><<<grid, kThreads, 0, st>>>(static_cast<uint32_t *>(d), bits, n);
    else fill_kernel<uint16_t><<<grid, kThreads, 0, st>>>(static_cast<uint16_t *>(d), (uint16_t)bits, n);
    FL_CUDA_CHECK(cudaGetLastError(), "fill_kernel launch");
    return FL_OK;
}

fl_status binary_impl(fl_binop op, fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, bool host) {
    if ((int)op < 0 || op >= FL_BINOP_COUNT) return FL_ERR(FL_EINVAL, "binary op on cuda: unknown op %d", (int)op);
    const char *name = fl_binop_names[op];
    FL_TRY(fl_cu_check_tensor(dst, host, name, "destination"));
    FL_TRY(fl_cu_check_tensor(a, host, name, "a"));
    FL_TRY(fl_cu_check_tensor(b, host, name, "b"));
    FL_TRY(check_same_shape(dst, a, name, "a"));
    FL_TRY(check_same_shape(dst, b, name, "b"));
    EwPlan p;
    const fl_tensor *ts[3] = { dst, a, b };
    ew_plan(&p, 3, ts);
    EwOp o = { K_BINARY, (int)op, 0.0f, 0, 0 };
    return ew_run(p, o, host);
}

fl_status binary_scalar_impl(fl_binop op, fl_tensor *dst, const fl_tensor *a, double s, bool first, bool host) {
    if ((int)op < 0 || op >= FL_BINOP_COUNT) return FL_ERR(FL_EINVAL, "scalar op on cuda: unknown op %d", (int)op);
    const char *name = fl_binop_names[op];
    FL_TRY(fl_cu_check_tensor(dst, host, name, "destination"));
    FL_TRY(fl_cu_check_tensor(a, host, name, "a"));
    FL_TRY(check_same_shape(dst, a, name, "a"));
    EwPlan p;
    const fl_tensor *ts[2] = { dst, a };
    ew_plan(&p, 2, ts);
    EwOp o = { K_SCALAR, (int)op, s, first ? 1 : 0, 0 };
    return ew_run(p, o, host);
}

fl_status unary_impl(fl_unop op, fl_tensor *dst, const fl_tensor *a, bool host) {
    if ((int)op < 0 || op >= FL_UNOP_COUNT) return FL_ERR(FL_EINVAL, "unary op on cuda: unknown op %d", (int)op);
    const char *name = fl_unop_names[op];
    FL_TRY(fl_cu_check_tensor(dst, host, name, "destination"));
    FL_TRY(fl_cu_check_tensor(a, host, name, "a"));
    FL_TRY(check_same_shape(dst, a, name, "a"));
    EwPlan p;
    const fl_tensor *ts[2] = { dst, a };
    ew_plan(&p, 2, ts);
    EwOp o = { K_UNARY, (int)op, 0.0f, 0, 0 };
    return ew_run(p, o, host);
}

}  // namespace

/* ---- the device entries (core/device.h) ------------------------------------------------------------ */

extern "C" fl_status fl_cuda_dev_copy(fl_tensor *dst, const fl_tensor *src) { return copy_impl(dst, src, false); }
extern "C" fl_status fl_cuda_dev_fill(fl_tensor *dst, double value) { return fill_impl(dst, value, false); }
extern "C" fl_status fl_cuda_dev_binary(fl_binop op, fl_tensor *dst, const fl_tensor *a, const fl_tensor *b) {
    return binary_impl(op, dst, a, b, false);
}
extern "C" fl_status fl_cuda_dev_binary_scalar(fl_binop op, fl_tensor *dst, const fl_tensor *a, double s,
                                               bool scalar_first) {
    return binary_scalar_impl(op, dst, a, s, scalar_first, false);
}
extern "C" fl_status fl_cuda_dev_unary(fl_unop op, fl_tensor *dst, const fl_tensor *a) {
    return unary_impl(op, dst, a, false);
}

/* ---- host runs of the device code (tests): the same checks, plans and loops over CPU tensors -------- */

extern "C" fl_status fl_cuda_copy_host(fl_tensor *dst, const fl_tensor *src) { return copy_impl(dst, src, true); }
extern "C" fl_status fl_cuda_fill_host(fl_tensor *dst, double value) { return fill_impl(dst, value, true); }
extern "C" fl_status fl_cuda_binary_host(fl_binop op, fl_tensor *dst, const fl_tensor *a, const fl_tensor *b) {
    return binary_impl(op, dst, a, b, true);
}
extern "C" fl_status fl_cuda_binary_scalar_host(fl_binop op, fl_tensor *dst, const fl_tensor *a, double s,
                                                bool scalar_first) {
    return binary_scalar_impl(op, dst, a, s, scalar_first, true);
}
extern "C" fl_status fl_cuda_unary_host(fl_unop op, fl_tensor *dst, const fl_tensor *a) {
    return unary_impl(op, dst, a, true);
}
extern "C" uint16_t fl_cuda_f32_to_bf16_host(float x) { return fl_f32_to_bf16_bits(x); }
extern "C" float fl_cuda_f16_to_f32_host(uint16_t h) { return fl_f16_bits_to_f32(h); }
