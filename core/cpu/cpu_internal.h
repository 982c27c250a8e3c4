/* cpu_internal.h — what the CPU kernel files share: strided load/store of any dtype to fp32 blocks,
 * and a tile walker over N-d (broadcast, non-contiguous) layouts that polls for Ctrl-C. */
#ifndef FL_CPU_INTERNAL_H
#define FL_CPU_INTERNAL_H
#include "cpu_isa.h"
#include "device.h"

#define FL_CPU_TILE 512              /* elements per tile: fits fp32 scratch buffers on the stack */
#define FL_CPU_POLL (1 << 20)        /* poll the interrupt flag about every this many elements */
#define FL_CPU_PAR_MIN (1 << 15)     /* below this many elements, stay on one thread */

/* The build targets x86-64-v3 (AVX2), which runs everywhere we deploy; transcendental-heavy loops
 * (GELU, softmax) get a second, AVX-512 copy of their inner span function, compiled with this
 * attribute and picked at run time by fl_cpu_avx512() (16 lanes instead of 8: ~2x on those loops).
 * Inline helpers the span calls are inlined into both copies. */
/* FL_CPU_TARGET512(isa): code for those ISA extensions that may use 512-bit vectors; GCC says so in the target
 * string, clang (the fuzz targets' compiler, `make fuzz`) by its own attribute and ignores a target string that
 * holds GCC's prefer-vector-width (then every intrinsic of the function fails to compile). */
#ifdef __clang__
#define FL_CPU_TARGET512(isa) __attribute__((target(isa), min_vector_width(512)))
#else
#define FL_CPU_TARGET512(isa) __attribute__((target(isa ",prefer-vector-width=512")))
#endif
#define FL_CPU_AVX512 FL_CPU_TARGET512("avx512f,avx512vl,avx512dq,avx512bw")
extern _Atomic bool fl_cpu_avx512_allowed;   /* cpu_nn_act.c; tests clear it to run the AVX2 copies */
static inline bool fl_cpu_avx512(void) {
    return fl_cpu_avx512_allowed && fl_cpu_isa_allows(FL_ISA_AVX512) && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}
/* The AVX512_BF16 dot products too (the bf16 GEMM and attention families). */
extern _Atomic bool fl_cpu_avx512_bf16_allowed;   /* cpu_fp8_mm_bf16.c; tests clear it to run the AVX-512 FMA family */
static inline bool fl_cpu_avx512_bf16(void) {
    return fl_cpu_avx512_bf16_allowed && fl_cpu_avx512() && fl_cpu_isa_allows(FL_ISA_AVX512_BF16) &&
           __builtin_cpu_supports("avx512bf16");
}

/* ps[j] += (double)row[j] for j < n (cpu_reduce.c): the column sums of a bias gradient a row at a time. Each column's
 * sum is its own, so the vector width changes no bit; 16 lanes where `wide` (fl_cpu_avx512(), which the caller asks
 * once, not per row), half the conversions. */
void fl_cpu_add_row_f64(double *ps, const float *row, int64_t n, bool wide);
/* Σ x[i]·x[i] of a run (each square rounded to fp32) in double, in reduce's lanes (cpu_reduce.c): the sum that
 * sum(dim) or mean(dim) gives the run's squares (a row's sum is 0 + this; its mean (0 + this) / n). */
double fl_cpu_sum_sq_f64(const float *x, int64_t n);

/* max |v| (NaN ignored, fl_amax_f32's) over the values each task t < ntasks makes: the first pass of current scaling
 * over values that are made, not stored (GELU, its derivative, LayerNorm's output). amax(ctx, t, buf, lo) returns
 * max(lo, task t's amax), and buf holds `scratch` floats for it; lo is the largest |value| its thread has made so far,
 * so a task may skip values it can show are not above lo (cpu_quant.c's GELU passes). Threads split the tasks when
 * `par`; a max, so any order gives it (cpu_reduce.c). FL_ENOMEM where a thread's scratch cannot be had. */
typedef float (*fl_cpu_amax_fn)(const void *ctx, int64_t t, float *buf, float lo);
fl_status fl_cpu_amax_made(int64_t ntasks, int64_t scratch, bool par, fl_cpu_amax_fn amax, const void *ctx,
                           float *out);

/* A row of n floats asked into the caches, for a row loop to call two rows ahead: in a training step its rows come
 * from memory, and the hardware's prefetchers run too little ahead of a loop that spends hundreds of cycles on
 * each row (LayerNorm's backward 25% faster in the GPT step; docs/performance.md). */
static inline void fl_cpu_prefetch_row(const float *row, int64_t n) {
    for (int64_t j = 0; j < n; j += 16) __builtin_prefetch(row + j, 0, 3);
}

/* n elements starting at element offset `off` (relative to fl_tensor_data) with element stride
 * `stride`, converted to / from fp32 (stores round to nearest even; FP8 stores saturate, no scale). */
void fl_cpu_load(const fl_tensor *t, int64_t off, int64_t stride, int64_t n, float *dst);
void fl_cpu_store(fl_tensor *t, int64_t off, int64_t stride, int64_t n, const float *src);

/* Calls fn once per tile of up to FL_CPU_TILE elements along the innermost (coalesced) dim of
 * `shape`, giving each tensor's element offset and inner stride. Tiles run in parallel for large
 * work; the interrupt flag is polled between chunks (returns FL_EINTR). nt <= 3. */
typedef void (*fl_cpu_tile_fn)(void *ctx, int64_t n, const int64_t *off, const int64_t *stride);
fl_status fl_cpu_for_tiles(int ndim, const int64_t *shape, int nt, const fl_tensor *const *ts,
                           fl_cpu_tile_fn fn, void *ctx);

/* The device entries (core/device.h lists them and their contracts), fl_cpu_dev_<name>, implemented in
 * the family files: elementwise, reduce, matmul, quant, nn_entries (over the kernels of cpu_nn.h),
 * optim, fp8_gemm; copy and fill in cpu_device.c. quantize_transpose is declared but not defined: the
 * CPU's GEMMs read transposed operands in place, so its table leaves that entry NULL. */
#define FL_CPU_DEV_DECLARE(name, params) fl_status fl_cpu_dev_##name params;
FL_DEVICE_ENTRIES(FL_CPU_DEV_DECLARE)
#undef FL_CPU_DEV_DECLARE

/* dst[M, N] = (a · b) · scale (+ bias[N]) with the epilogue fused into oneDNN's kernel (cpu_matmul.c);
 * *done = false when it cannot be (the caller then does the GEMM and the epilogue itself). */
fl_status fl_cpu_matmul_scaled(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, float scale, const float *bias,
                               bool *done);
/* fp32 batched GEMM on raw buffers for kernels that are not tensor ops (attention): for each of `batch`
 * entries z, C_z[m, n] = op(A_z)·op(B_z), op(A) [m, k], op(B) [k, n]. A_z starts at a + z·sa and is stored
 * row-major [m, k] with row stride lda, or [k, m] when ta (read transposed in place); likewise B_z at
 * b + z·sb, [k, n] or [n, k] when tb, row stride ldb; C_z at c + z·sc, [m, n] with row stride ldc,
 * overwritten. Strides are in elements, so operands can be blocks of larger matrices. Goes through the
 * cached oneDNN primitives of fl_cpu_dev_matmul (one per distinct shape and stride set). */
fl_status fl_cpu_gemm_f32(int64_t batch, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, int64_t sa, bool ta,
                          const float *b, int64_t ldb, int64_t sb, bool tb, float *c, int64_t ldc, int64_t sc);
/* The same with bf16 operands (bits), fp32 accumulation and result; FL_EDEVICE where oneDNN has no bf16 kernel
 * (2.6 on a CPU without AVX-512). */
fl_status fl_cpu_gemm_bf16(int64_t batch, int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda, int64_t sa,
                           bool ta, const uint16_t *b, int64_t ldb, int64_t sb, bool tb, float *c, int64_t ldc, int64_t sc);
/* The process's oneDNN engine and stream (cpu_matmul.c's, made on first use with FP8LAB_CPU_ISA's cap), held under
 * the lock that serialises their use: *engine and *stream are dnnl_engine_t and dnnl_stream_t. On FL_OK the caller
 * holds the lock until fl_cpu_dnnl_release(); on an error it does not. (cpu_conv.c's convolution.) */
fl_status fl_cpu_dnnl_acquire(void **engine, void **stream);
void fl_cpu_dnnl_release(void);
/* oneDNN 2.6's JIT (Xbyak, built without exceptions) writes its code into a buffer whose mmap it never checks, in
 * dnnl_primitive_desc_create (brgconv's kernels) and dnnl_primitive_create: under a narrow `ulimit -v` both died of
 * SIGSEGV (a write through NULL) where they must fail. fl_cpu_dnnl_room: FL_OK where `need` bytes plus
 * FL_CPU_DNNL_HEADROOM of address space are free now (a trial mapping), else FL_ENOMEM naming `op`; called before a
 * descriptor is made. fl_cpu_dnnl_create: dnnl_primitive_create(*prim, pd) (prim a dnnl_primitive_t *, pd a
 * const_dnnl_primitive_desc_t) after fl_cpu_dnnl_room of the primitive's scratchpad; FL_ENOMEM where oneDNN answers
 * out_of_memory too (cpu_dnnl_create.c). */
#define FL_CPU_DNNL_HEADROOM (INT64_C(32) << 20)
fl_status fl_cpu_dnnl_room(const char *op, size_t need);
fl_status fl_cpu_dnnl_create(void *prim, const void *pd, const char *op);
/* The conv's blocked copies kept between calls (cpu_conv.c's arena, up to 64 MiB) freed; under
 * fl_cpu_dnnl_acquire's lock, outside a conv's run (fl_cpu_dnnl_room gives their address space to a primitive). */
void fl_cpu_conv_arena_free(void);
/* Under a finite address-space limit, the freed blocks of 1 MiB and more that the CPU device keeps for reuse are
 * unmapped (cpu_device.c); nothing otherwise. */
void fl_cpu_release_kept(void);
/* The least recently used cached matmul primitive destroyed (its JIT code's address space given back); false where
 * none is cached. Under fl_cpu_dnnl_acquire's lock, outside a matmul's run (cpu_matmul.c: no caller holds an entry
 * across the making of another). */
bool fl_cpu_matmul_drop_oldest(void);
/* The least recently used cached conv primitives destroyed, as fl_cpu_matmul_drop_oldest; false where none is cached
 * but the one a conv holds while it makes its other chunk's (cpu_conv.c). */
bool fl_cpu_conv_drop_oldest(void);
/* A oneDNN call's status s (a dnnl_status_t) as the core's: FL_OK for success; FL_ENOMEM for out_of_memory, "op: out
 * of memory in oneDNN's <call>" as the core's other out-of-memory errors say it, so that the binding collects and
 * tries once more; FL_EDEVICE naming the call and the status otherwise (cpu_dnnl_create.c). */
fl_status fl_cpu_dnnl_status(int s, const char *op, const char *call);
/* The tests' hook: true where FP8LAB_TEST_DNNL_OOM (read at the first call) names `call` ("memory_create",
 * "execute"): "call" fails every such call, "call:N" the next N, as out_of_memory without running it. */
bool fl_cpu_dnnl_fail_injected(const char *call);
/* linear_relu_bf16's AVX512_BF16 epilogue (cpu_linear_act.c); tests clear it to run the portable one */
extern _Atomic bool fl_cpu_linear_act_wide_allowed;
/* c[m, n] (fp32, row stride n) = a[m, k] · b[n, k]ᵀ, row-major bf16 operands, by the primitive fl_cpu_dev_matmul runs
 * for that linear (the same bits); *ran = false, nothing written, where fl_cpu_dev_matmul would take another path. */
fl_status fl_cpu_matmul_bf16_nt(const uint16_t *a, const uint16_t *b, float *c, int64_t m, int64_t n, int64_t k,
                                bool *ran);
/* The bytes of a contiguous CPU FP8 tensor decoded exactly into a new contiguous bf16 tensor (scale not
 * applied); cpu_fp8_gemm.c. */
fl_status fl_fp8_decode_bf16(fl_tensor **out, const fl_tensor *q);
#ifdef __x86_64__
#include <immintrin.h>
#include <math.h>
/* The first n (clamped to 0..16) of a 16-lane vector's lanes: a row's last, partial vector. */
static inline __mmask16 fl_avx512_lanes(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}
/* fl_nn_expf (cpu_nn_internal.h) on 16 lanes, with fused multiply-adds, but for 2^k: the reduced polynomial y with
 * e^x = y·2^k (*k whole numbers, x clamped to [-104, 88.72] first). The attention kernels apply 2^k their own way
 * (vscalefps, or two exact factors as the 8-lane exp8 does, for its bits) and then fl_exp16_fix. */
static inline __attribute__((always_inline, target("avx512f"))) __m512 fl_exp16_poly(__m512 x, __m512 *k) {
    const __m512 hi = _mm512_set1_ps(88.7228394f), lo = _mm512_set1_ps(-104.0f), c = _mm512_set1_ps(12582912.0f);
    const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);   /* NaN → lo here, restored by fl_exp16_fix */
    *k = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), c), c);
    __m512 r = _mm512_fnmadd_ps(*k, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(*k, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    return _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
}
/* e^x's range after the scaling: 0 below -104, inf above 88.72, NaN for NaN. */
static inline __attribute__((always_inline, target("avx512f"))) __m512 fl_exp16_fix(__m512 y, __m512 x) {
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-104.0f), _CMP_LT_OQ), _mm512_setzero_ps());
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.7228394f), _CMP_GT_OQ),
                           _mm512_set1_ps(INFINITY));
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}
/* The 128 FP8 magnitudes' bf16 bits (index = byte & 0x7f; the sign is bit 7 of the byte), for table-lookup
 * decodes (cpu_fp8_gemm.c builds it once from its scalar decode). */
const uint16_t *fl_fp8_bf16_lut(bool e5);
/* That table in four registers, and 32 FP8 codes (zero-extended to 16-bit lanes) → their bf16 bits:
 * vpermi2w looks each up by its low 6 bits, bit 6 picks the table half, bit 7 is the sign. Inlined into
 * AVX-512 callers (the bulk decode, cpu_fp8_mm.c's packing). */
typedef struct { __m512i t0, t1, t2, t3; } fl_fp8_lut4;
static inline __attribute__((always_inline, target("avx512f,avx512bw"))) fl_fp8_lut4 fl_fp8_lut_load(const uint16_t *t) {
    fl_fp8_lut4 L = { _mm512_loadu_si512(t), _mm512_loadu_si512(t + 32), _mm512_loadu_si512(t + 64),
                      _mm512_loadu_si512(t + 96) };
    return L;
}
static inline __attribute__((always_inline, target("avx512f,avx512bw"))) __m512i fl_fp8_dec32(__m512i v,
                                                                                               const fl_fp8_lut4 *L) {
    const __m512i lo = _mm512_permutex2var_epi16(L->t0, v, L->t1), hi = _mm512_permutex2var_epi16(L->t2, v, L->t3);
    const __m512i r = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(v, _mm512_set1_epi16(0x40)), lo, hi);
    return _mm512_or_si512(r, _mm512_slli_epi16(_mm512_and_si512(v, _mm512_set1_epi16(0x80)), 8));
}
#endif
/* The CPU's own FP8 GEMM (cpu_fp8_mm.c): dst[M, N] = (dec(a)·dec(b))·(sa·sb) (+ bias[N]) with a, b FP8 [M, K],
 * [K, N], each contiguous or a transposed contiguous matrix, decoded while packing; sa, sb their scale_inv:
 * per tensor, or per row of a (scale_axis 0) and per column of b (scale_axis 1), as cpu_fp8_gemm.c's scale
 * pass applies them. It runs the AMX kernel family where the CPU has it (and the kernel lets the process use the
 * tiles) and fl_cpu_amx_allowed and fl_cpu_avx512() allow it, else the AVX512_BF16 one where the CPU has it and
 * fl_cpu_avx512() allows it, else the AVX2 + FMA one (cpu_fp8_mm.h); fl_cpu_fp8_mm_family names the one it would
 * run (NULL: none).
 * *done = false when it declines (no family, a layout or scale axis it does not read, or switched off); the
 * caller then takes decode + oneDNN. fl_cpu_fp8_mm_faster: whether it measured faster than that for this GEMM
 * (the device entry asks first). fl_cpu_fp8_mm_allowed: the switch (tests and benchmarks clear it to compare). */
extern _Atomic bool fl_cpu_fp8_mm_allowed;
extern _Atomic bool fl_cpu_amx_allowed;   /* cpu_fp8_mm_amx.c; tests clear it to run the AVX512_BF16 family */
/* Whether this process may use AMX-BF16: the CPU has it (with AVX512_BF16, and fl_cpu_avx512() allows AVX-512)
 * and Linux granted the tile registers (asked once). cpu_fp8_mm_amx.c; the FP8 GEMM and bf16 attention use it. */
bool fl_cpu_amx(void);
bool fl_cpu_fp8_mm_faster(const fl_tensor *a, const fl_tensor *b);
fl_status fl_cpu_fp8_mm(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, const float *bias, const float *res,
                        bool *done);
/* The same driver's FMA families (AVX-512 where the CPU has it and allows it, else AVX2; the same bits) on wider
 * operands: dst[B, M, N] = a[B, M, K]·b[B, K, N], a and b both bf16,
 * both fp16 or both fp32, each batch entry contiguous or a transposed contiguous matrix, a batch of 1 broadcast;
 * each product added to its fp32 sum by one FMA in K order (exact products for bf16 and fp16); dst fp32, or the
 * operands' 16-bit type (rounded from fp32 as fl_cpu_store rounds). *done = false when it declines (not that
 * layout, no AVX2 + FMA, or fl_cpu_fma_mm_allowed cleared). cpu_matmul.c runs it on CPUs without AVX-512
 * (docs/performance.md, "fp32 and bf16 GEMMs without AVX-512"): bf16 and fp16 ones always, fp32 ones from
 * FL_CPU_FMA_MM_F32_MIN FLOPs; and the bf16 and fp16 ones where fl_cpu_fma_mm_first() says so. */
extern _Atomic bool fl_cpu_fma_mm_allowed;
#define FL_CPU_FMA_MM_F32_MIN 2.5e8   /* the fewest FLOPs (per batch entry) of an fp32 GEMM cpu_matmul.c gives it */
fl_status fl_cpu_fma_mm(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, bool *done);
/* Whether this CPU's fastest GEMM family is an FMA one (neither AMX nor a vdpbf16ps faster than its FMAs: Intel
 * without AMX, any CPU without AVX512_BF16), so that its 16-bit GEMMs are faster widened in fp8lab's panels than in
 * oneDNN 2.6, which converts them without AVX512_BF16 and runs the slower dot product on Intel's (the GPT's twelve
 * bf16 GEMMs in oneDNN 144.6 ms capped at avx512 and 50.0 at avx512_bf16, against 30.3 for fp32; in the AVX-512 FMA
 * family 33.8 and 34.1; docs/performance.md, "Intel without the tiles"). */
bool fl_cpu_fma_mm_first(void);

/* Rows per chunk of a column sum (the bias gradient): each chunk's rows are summed in order in double, the
 * chunks combined in order. fl_cpu_dev_reduce over dim 0 and quantize_dbias both sum this way, so their
 * results have the same bits whatever the thread count. */
#define FL_CPU_SUM_ROWS 256

/* Split a contiguous tensor around `axis` into [outer, size, inner]. */
/* y = e^x, unary's exp (y may be x) */
void fl_cpu_map_exp(const float *x, float *y, int64_t n);

static inline void fl_cpu_split_axis(const fl_tensor *t, int axis, int64_t *outer, int64_t *size, int64_t *inner) {
    *outer = 1; *inner = 1; *size = t->shape[axis];
    for (int i = 0; i < axis; i++) *outer *= t->shape[i];
    for (int i = axis + 1; i < t->ndim; i++) *inner *= t->shape[i];
}
#endif
