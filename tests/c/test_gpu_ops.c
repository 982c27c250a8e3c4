/* test_gpu_ops.c — the CUDA device's tensor ops (kernels/elementwise.cu, reduce.cu, matmul.cu and the
 * strided batch of gemm_lt.cu) against the CPU device's entries of the same name, on random data with
 * specials (NaN payloads, ±inf, ±0, subnormals, overflow) in many layouts: contiguous, misaligned,
 * transposed, padded slices, permuted, broadcast (stride 0), 0-d, 8-d and empty tensors, and sizes that
 * take many blocks and chunks. Copies, fills and conversions are bit-exact; fp32 elementwise arithmetic
 * is bit-exact apart from NaN payloads (GPU arithmetic returns a canonical NaN);
 * max/min/amax are exact; sums agree to one rounding of the result plus the bound on reordering a double
 * sum; GEMMs to the fp32-accumulation bound. Each suite runs twice: gpu_*_on_host runs the kernels' own
 * __host__ __device__ code (the same plans and loops) on host memory, which works wherever CUDA is built
 * in, and gpu_* runs on the GPU, passing with "skipped: no GPU" without one. */
#include "runner.h"
#include "gpu_test.h"
#include "device.h"
#include "format.h"
#include "ops.h"
#include "rng.h"
#include "tensor.h"
#include <float.h>
#include <stdint.h>
#include <stdlib.h>

#ifndef FL_HAVE_CUDA

TEST(gpu_ops_not_built) { printf("  skipped: built without CUDA\n"); }

#else

#include "../../kernels/cuda_entries.h"
#include "../../kernels/fl_cuda_host.h"
#include "../../kernels/gemm_lt.h"


/* ---- the two ways to run the device code -------------------------------------------------------- */

typedef struct {
    const char *name;
    int dev;   /* where its tensors live */
    fl_status (*copy)(fl_tensor *, const fl_tensor *);
    fl_status (*fill)(fl_tensor *, double);
    fl_status (*binary)(fl_binop, fl_tensor *, const fl_tensor *, const fl_tensor *);
    fl_status (*binary_scalar)(fl_binop, fl_tensor *, const fl_tensor *, double, bool);
    fl_status (*unary)(fl_unop, fl_tensor *, const fl_tensor *);
    fl_status (*reduce)(fl_redop, fl_tensor *, const fl_tensor *, int);
    fl_status (*sumsq)(const fl_tensor *const *, int, double *);
} impl;

static const impl HOST_RUN = { "host run", FL_DEV_CPU, fl_cuda_copy_host, fl_cuda_fill_host, fl_cuda_binary_host,
                               fl_cuda_binary_scalar_host, fl_cuda_unary_host, fl_cuda_reduce_host, fl_cuda_sumsq_host };
static const impl GPU_RUN = { "gpu", FL_DEV_CUDA, fl_cuda_dev_copy, fl_cuda_dev_fill, fl_cuda_dev_binary,
                              fl_cuda_dev_binary_scalar, fl_cuda_dev_unary, fl_cuda_dev_reduce, fl_cuda_dev_sumsq };

static size_t esz(fl_dtype t) { return fl_format(t)->size; }
static const char *dtn(fl_dtype t) { return fl_format(t)->name; }

/* ---- element codes ---------------------------------------------------------------------------------- */

static uint32_t code_at(const void *buf, fl_dtype dt, int64_t i) {
    switch (esz(dt)) {
    case 4: return ((const uint32_t *)buf)[i];
    case 2: return ((const uint16_t *)buf)[i];
    default: return ((const uint8_t *)buf)[i];
    }
}
static void set_code(void *buf, fl_dtype dt, int64_t i, uint32_t c) {
    switch (esz(dt)) {
    case 4: ((uint32_t *)buf)[i] = c; break;
    case 2: ((uint16_t *)buf)[i] = (uint16_t)c; break;
    default: ((uint8_t *)buf)[i] = (uint8_t)c; break;
    }
}
static double decode(uint32_t c, fl_dtype dt) {
    switch (dt) {
    case FL_F32: return from_bits(c);
    case FL_BF16: return fl_bf16_to_f32((uint16_t)c);
    case FL_F16: return fl_f16_to_f32((uint16_t)c);
    default: return fl_fp8_to_f32((uint8_t)c, dt);
    }
}
static uint32_t encode(float x, fl_dtype dt) {
    switch (dt) {
    case FL_F32: return bits_of(x);
    case FL_BF16: return fl_f32_to_bf16(x);
    case FL_F16: return fl_f32_to_f16(x);
    default: return fl_f32_to_fp8(x, dt, FL_SATURATE);
    }
}
static bool code_is_nan(uint32_t c, fl_dtype dt) { double v = decode(c, dt); return v != v; }
/* Position on the number line in units of the format's spacing (sign-magnitude to an integer). */
static int64_t ordinal(uint32_t c, fl_dtype dt) {
    uint32_t sign = dt == FL_F32 ? 0x80000000u : esz(dt) == 2 ? 0x8000u : 0x80u;
    int64_t mag = (int64_t)(c & (sign - 1));
    return c & sign ? -mag : mag;
}
/* Spacing of dt relative to the value (one ulp ≤ rel·|x| for normal x) and its smallest subnormal. */
static double ulp_rel(fl_dtype dt) { return ldexp(1.0, -fl_format(dt)->mant_bits); }

enum { EXACT = 0, NAN_ANY = 1, ZERO_ANY = 2 };

/* Compares n codes: equal, or within `ulps` steps, or (flags) both NaN / both zeros of either sign.
 * Returns the number of differing elements; *first is the first of them.
 * Two zeros are 0 steps apart but not within `ulps`: their signs must agree unless ZERO_ANY. That is what
 * IEEE-correct libraries give for every op allowed 1 ulp here (CUDA's double functions and glibc's alike):
 * an exact zero result's sign is fixed by C99 Annex F (sin, tan, asin, atan, sinh, tanh, erf, log1p, expm1
 * of ±0 are ±0; atan2(±0, x ≥ +0) and atan2(±y, +inf) are ±0; pow(±0, odd n > 0) is ±0, other powers of
 * ±0 are +0 or inf; log, log2, log10 of 1 and acos(1) are +0; exp, exp2 and sigmoid are never negative;
 * cos and cosh are never 0). A zero from a nonzero result (a double underflow, or the rounding to fp32 and
 * narrower) takes the exact result's sign: an error of a few ulp relative to the result cannot flip it, odd
 * functions of tiny x return about x, and pow of a negative base to an odd power negates the power of |x|
 * in both libraries, so its underflow is -0 in both. Hence a zero of the other sign is a bug. */
static int64_t compare_codes(const void *got, const void *ref, fl_dtype dt, int64_t n, int ulps, int flags, int64_t *first) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t g = code_at(got, dt, i), r = code_at(ref, dt, i);
        if (g == r) continue;
        bool gn = code_is_nan(g, dt), rn = code_is_nan(r, dt);
        if (gn || rn) {
            if (gn && rn && (flags & NAN_ANY)) continue;
        } else {
            bool zeros = decode(g, dt) == 0.0 && decode(r, dt) == 0.0;   /* +0 and -0 (g != r) */
            if ((flags & ZERO_ANY) && zeros) continue;
            int64_t d = ordinal(g, dt) - ordinal(r, dt);
            if (ulps > 0 && !zeros && d <= ulps && d >= -ulps) continue;
        }
        if (!bad) *first = i;
        bad++;
    }
    return bad;
}

/* n random codes of dtype dt: normals at magnitudes from 1e-9 to 7e4 and, with specials, the values
 * where conversions and arithmetic go wrong, including NaNs with payloads (signalling ones too). */
#define POOL (1 << 22)
static float *normal_pool(void) {   /* drawn once: the suites need many millions of values */
    static float *pool;
    if (!pool) {
        pool = malloc(POOL * sizeof(float));
        fl_rng r;
        fl_rng_seed(&r, 12345);
        fl_rng_normal(&r, pool, POOL, 0.0f, 1.0f);
    }
    return pool;
}

static void gen_codes(void *out, fl_dtype dt, int64_t n, uint64_t seed, bool specials) {
    if (n <= 0) return;
    float *x = malloc((size_t)n * sizeof(float));
    const float *pool = normal_pool();
    const uint64_t start = seed * 1000003u;
    static const float mags[] = { 1e-9f, 1e-4f, 0.01f, 1.0f, 30.0f, 500.0f, 7e4f, 0.3f };
    for (int64_t i = 0; i < n; i++) x[i] = pool[(start + (uint64_t)i) & (POOL - 1)] * mags[(i / 61) % 8];
    if (specials) {
        const float sp[] = { 0.0f, -0.0f, NAN, -NAN, INFINITY, -INFINITY, 1e-40f, -1e-45f, 448.0f, -464.0f,
                             65504.0f, 65520.0f, -65519.0f, 3.4e38f, 6.0e-8f, 2.98e-8f, 1.0f + 0x1p-8f,
                             1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, from_bits(0x3f808000u), from_bits(0x3f818000u) };
        int ns = (int)(sizeof sp / sizeof sp[0]);
        for (int64_t i = 0; i < n; i += 37) x[i] = sp[(i / 37) % ns];
    }
    for (int64_t i = 0; i < n; i++) set_code(out, dt, i, encode(x[i], dt));
    if (specials) {   /* NaNs with payloads, as raw codes */
        const uint32_t nan32[] = { 0x7f800001u, 0xffc12345u, 0x7fbfffffu }, nan16b[] = { 0x7f81u, 0xffc1u, 0x7fbfu },
                       nan16h[] = { 0x7c01u, 0xfe12u, 0x7dffu }, nan8a[] = { 0x7fu, 0xffu, 0x7fu }, nan8b[] = { 0x7du, 0xfeu, 0x7fu };
        const uint32_t *nc = dt == FL_F32 ? nan32 : dt == FL_BF16 ? nan16b : dt == FL_F16 ? nan16h : dt == FL_E4M3 ? nan8a : nan8b;
        for (int64_t i = 11; i < n; i += 101) set_code(out, dt, i, nc[(i / 101) % 3]);
    }
    free(x);
}

/* n codes of N(0, 1) values: GEMM operands, whose products must stay finite. */
static void gen_normal_codes(void *out, fl_dtype dt, int64_t n, uint64_t seed) {
    const float *pool = normal_pool();
    for (int64_t i = 0; i < n; i++) set_code(out, dt, i, encode(pool[(seed * 1000003u + (uint64_t)i) & (POOL - 1)], dt));
}

/* ---- buffers on both sides and strided views of them ------------------------------------------------ */

static fl_status put_bytes(fl_tensor *t, const void *src, size_t n) {
    if (!n) return FL_OK;
    if (t->device == FL_DEV_CPU) { memcpy(fl_tensor_data(t), src, n); return FL_OK; }
    return fl_device_get(t->device)->from_host(fl_tensor_data(t), src, n);
}
static fl_status get_bytes(const fl_tensor *t, void *dst, size_t n) {
    if (!n) return FL_OK;
    if (t->device == FL_DEV_CPU) { memcpy(dst, fl_tensor_data(t), n); return FL_OK; }
    return fl_device_get(t->device)->to_host(dst, fl_tensor_data(t), n);
}

/* The same 1-D storage twice: `ref` on the CPU for the CPU device, `got` where the impl runs. */
typedef struct { fl_tensor *ref, *got; int64_t n; fl_dtype dt; } twin;

static fl_status twin_make(twin *t, const impl *im, fl_dtype dt, int64_t n, const void *codes) {
    t->ref = t->got = NULL; t->n = n; t->dt = dt;
    FL_TRY(fl_tensor_empty(&t->ref, dt, 1, &n, FL_DEV_CPU));
    FL_TRY(fl_tensor_empty(&t->got, dt, 1, &n, im->dev));
    FL_TRY(put_bytes(t->ref, codes, (size_t)n * esz(dt)));
    return put_bytes(t->got, codes, (size_t)n * esz(dt));
}
static void twin_free(twin *t) { fl_tensor_release(t->ref); fl_tensor_release(t->got); t->ref = t->got = NULL; }

typedef struct { int ndim; int64_t shape[FL_MAX_DIMS], stride[FL_MAX_DIMS], offset; } layout;

enum { L_CONTIG, L_OFFSET, L_TRANSPOSED, L_PADDED, L_PERMUTED, L_BCAST, L_BCAST_INNER, L_KINDS };
static const char *const LNAME[L_KINDS] = { "contiguous", "offset", "transposed", "padded", "permuted", "broadcast",
                                            "inner-broadcast" };

/* A layout of kind `kind` for `shape`; returns how many elements its buffer needs. */
static int64_t make_layout(layout *l, int kind, int ndim, const int64_t *shape) {
    memset(l, 0, sizeof *l);
    l->ndim = ndim;
    bool empty = false;
    for (int i = 0; i < ndim; i++) { l->shape[i] = shape[i]; empty |= shape[i] == 0; }
    int64_t s = 1;
    switch (kind) {
    case L_TRANSPOSED:   /* column-major */
        for (int i = 0; i < ndim; i++) { l->stride[i] = s; s *= shape[i]; }
        break;
    case L_PADDED:       /* a slice of a larger row-major array */
        for (int i = ndim - 1; i >= 0; i--) { l->stride[i] = s; s *= shape[i] + 1 + (i & 1); }
        l->offset = 5;
        break;
    case L_PERMUTED: {   /* dims laid out innermost-first in the order ndim/2, ..., ndim-1, 0, ..., ndim/2-1 */
        for (int j = 0; j < ndim; j++) {
            int d = (ndim / 2 + j) % ndim;
            l->stride[d] = s;
            s *= shape[d];
        }
        break;
    }
    default:
        for (int i = ndim - 1; i >= 0; i--) { l->stride[i] = s; s *= shape[i]; }
        if (kind == L_OFFSET) l->offset = 3;   /* misaligned for every vector width */
        if (kind == L_BCAST) for (int i = 0; i < ndim; i += 2) l->stride[i] = 0;
        if (kind == L_BCAST_INNER && ndim > 0) l->stride[ndim - 1] = 0;
    }
    int64_t extent = l->offset + 1;
    if (!empty)
        for (int i = 0; i < ndim; i++) extent += (shape[i] - 1) * l->stride[i];
    return extent;
}

/* A view of base's storage with layout l. */
static fl_tensor *view_of(fl_tensor *base, const layout *l) {
    fl_tensor *v = NULL;
    if (fl_tensor_narrow(&v, base, 0, 0, base->shape[0]) != FL_OK) return NULL;
    v->ndim = l->ndim;
    for (int i = 0; i < FL_MAX_DIMS; i++) { v->shape[i] = i < l->ndim ? l->shape[i] : 0; v->stride[i] = l->stride[i]; }
    v->offset = base->offset + l->offset;
    return v;
}

typedef struct { int ndim; int64_t shape[FL_MAX_DIMS]; } shape_t;

static const char *shape_s(char *buf, size_t n, const shape_t *s) { return fl_shape_str(buf, n, s->ndim, s->shape); }
static int64_t numel_of(const shape_t *s) { int64_t n = 1; for (int i = 0; i < s->ndim; i++) n *= s->shape[i]; return n; }

/* Reads a twin's `got` storage and compares it with `ref`'s; codes[0..1]: got and ref at the first
 * difference. -1 when the read fails. */
static int64_t compare_twin(const twin *t, int ulps, int flags, int64_t *first, uint32_t codes[2]) {
    size_t bytes = (size_t)t->n * esz(t->dt);
    void *g = malloc(bytes + 1);
    int64_t bad = -1;
    *first = 0;
    if (get_bytes(t->got, g, bytes) == FL_OK) {
        bad = compare_codes(g, fl_tensor_data(t->ref), t->dt, t->n, ulps, flags, first);
        codes[0] = t->n ? code_at(g, t->dt, *first) : 0;
        codes[1] = t->n ? code_at(fl_tensor_data(t->ref), t->dt, *first) : 0;
    }
    free(g);
    return bad;
}

/* ---- copy ------------------------------------------------------------------------------------------- */

static const shape_t COPY_SHAPES[] = {
    { 0, { 0 } }, { 1, { 1 } }, { 1, { 7 } }, { 1, { 5003 } }, { 2, { 33, 65 } }, { 4, { 3, 1, 17, 5 } },
    { 8, { 2, 3, 2, 3, 2, 3, 2, 2 } }, { 3, { 4, 0, 3 } }, { 2, { 300, 257 } }, { 3, { 1, 1, 1 } }, { 2, { 1, 9 } },
};

static void copy_suite(const impl *im, int *fl__failed) {
    const fl_device *cpu = fl_cpu_device();
    static const fl_dtype pairs[][2] = {   /* { dst, src } */
        { FL_F32, FL_F32 }, { FL_BF16, FL_BF16 }, { FL_F16, FL_F16 }, { FL_E4M3, FL_E4M3 }, { FL_E5M2, FL_E5M2 },
        { FL_F32, FL_BF16 }, { FL_F32, FL_F16 }, { FL_BF16, FL_F32 }, { FL_F16, FL_F32 }, { FL_BF16, FL_F16 },
        { FL_F16, FL_BF16 } };
    static const int dkinds[] = { L_CONTIG, L_OFFSET, L_TRANSPOSED, L_PADDED, L_PERMUTED };
    int runs = 0, failures = 0;
    for (size_t si = 0; si < sizeof COPY_SHAPES / sizeof COPY_SHAPES[0]; si++)
        for (size_t pi = 0; pi < sizeof pairs / sizeof pairs[0]; pi++)
            for (int dk = 0; dk < 5; dk++)
                for (int sk = 0; sk < L_KINDS; sk++) {
                    const shape_t *sh = &COPY_SHAPES[si];
                    if (numel_of(sh) > 10000 && (dk * 7 + sk + (int)pi) % 5 != 0) continue;
                    fl_dtype ddt = pairs[pi][0], sdt = pairs[pi][1];
                    layout dl, sl;
                    int64_t dn = make_layout(&dl, dkinds[dk], sh->ndim, sh->shape);
                    int64_t sn = make_layout(&sl, sk, sh->ndim, sh->shape);
                    void *dcodes = malloc((size_t)dn * 4), *scodes = malloc((size_t)sn * 4);
                    gen_codes(dcodes, ddt, dn, 1000 + si, true);   /* what the copy must not touch */
                    gen_codes(scodes, sdt, sn, 2000 + si * 31 + pi, true);
                    twin D, S;
                    fl_status st = twin_make(&D, im, ddt, dn, dcodes);
                    if (st == FL_OK) st = twin_make(&S, im, sdt, sn, scodes);
                    REQUIRE(st == FL_OK, "buffers: %s", fl_last_error());
                    fl_tensor *dr = view_of(D.ref, &dl), *dg = view_of(D.got, &dl);
                    fl_tensor *sr = view_of(S.ref, &sl), *sg = view_of(S.got, &sl);
                    REQUIRE(dr && dg && sr && sg, "views: %s", fl_last_error());
                    char what[300], sb[100];
                    snprintf(what, sizeof what, "%s: copy %s %s <- %s %s, shape %s", im->name, LNAME[dkinds[dk]], dtn(ddt),
                             LNAME[sk], dtn(sdt), shape_s(sb, sizeof sb, sh));
                    fl_status rs = cpu->copy(dr, sr), gs = im->copy(dg, sg);
                    CHECK(rs == FL_OK && gs == FL_OK, "%s: status cpu %d, %s %d: %s", what, (int)rs, im->name, (int)gs,
                          fl_last_error());
                    int64_t first = 0;
                    uint32_t cc[2];
                    int64_t bad = compare_twin(&D, 0, EXACT, &first, cc);
                    if (bad != 0 && failures++ < 8)
                        CHECK(0, "%s: %lld of %lld destination elements differ (first at %lld: 0x%x vs cpu 0x%x)", what,
                              (long long)bad, (long long)dn, (long long)first, cc[0], cc[1]);
                    runs++;
                    fl_tensor_release(dr); fl_tensor_release(dg); fl_tensor_release(sr); fl_tensor_release(sg);
                    twin_free(&D); twin_free(&S);
                    free(dcodes); free(scodes);
                }
    CHECK(failures == 0, "%d of %d copies differ from the CPU", failures, runs);

    /* FP8 to another dtype needs quantize/dequantize, as on the CPU. */
    int64_t four = 4;
    uint8_t z[16] = { 0 };
    twin A, B;
    REQUIRE_OK(twin_make(&A, im, FL_E4M3, four, z));
    REQUIRE_OK(twin_make(&B, im, FL_F32, four, z));
    CHECK(cpu->copy(B.ref, A.ref) == FL_EINVAL && im->copy(B.got, A.got) == FL_EINVAL &&
          strstr(fl_last_error(), "quantize"), "e4m3 -> fp32: %s", fl_last_error());
    CHECK(im->copy(A.got, B.got) == FL_EINVAL, "fp32 -> e4m3 must be refused");
    twin_free(&A); twin_free(&B);
}

/* ---- fill ------------------------------------------------------------------------------------------- */

static void fill_suite(const impl *im, int *fl__failed) {
    const fl_device *cpu = fl_cpu_device();
    const double values[] = { 0.0, -0.0, 1.0, 3.14159265358979, 1e10, -1e10, NAN, 1e-8, 65519.0, 65520.0, 500.0,
                              -1e300, 1e-45, 0.1, 3.1, 1.0625, -0.3, 1.00000001 };
    const shape_t shapes[] = { { 0, { 0 } }, { 1, { 5 } }, { 2, { 1000, 33 } }, { 2, { 2, 0 } } };
    for (int dt = 0; dt < FL_DTYPE_COUNT; dt++)
        for (size_t vi = 0; vi < sizeof values / sizeof values[0]; vi++)
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
                int64_t n = numel_of(&shapes[si]), nb = n ? n : 1;
                void *codes = malloc((size_t)nb * 4);
                gen_codes(codes, (fl_dtype)dt, nb, 7, false);
                twin D;
                REQUIRE_OK(twin_make(&D, im, (fl_dtype)dt, nb, codes));
                layout l;
                make_layout(&l, L_CONTIG, shapes[si].ndim, shapes[si].shape);
                fl_tensor *r = view_of(D.ref, &l), *g = view_of(D.got, &l);
                REQUIRE(r && g, "views: %s", fl_last_error());
                CHECK_OK(cpu->fill(r, values[vi]));
                CHECK_OK(im->fill(g, values[vi]));
                int64_t first = 0;
                uint32_t cc[2];
                int64_t bad = compare_twin(&D, 0, EXACT, &first, cc);
                CHECK(bad == 0, "%s: fill %s with %g, %lld elements: %lld differ (first %lld: 0x%x vs cpu 0x%x)",
                      im->name, dtn((fl_dtype)dt), values[vi], (long long)n, (long long)bad, (long long)first, cc[0], cc[1]);
                fl_tensor_release(r); fl_tensor_release(g);
                twin_free(&D);
                free(codes);
            }
    /* a non-contiguous destination is refused rather than written as if it were contiguous */
    int64_t n = 12;
    float zero[12] = { 0 };
    twin D;
    REQUIRE_OK(twin_make(&D, im, FL_F32, n, zero));
    layout l;
    int64_t shape[2] = { 3, 4 };
    make_layout(&l, L_TRANSPOSED, 2, shape);
    fl_tensor *g = view_of(D.got, &l);
    CHECK(im->fill(g, 1.0) == FL_EINVAL, "a transposed destination must be refused");
    fl_tensor_release(g);
    twin_free(&D);
}

/* ---- binary, scalar and unary ops -------------------------------------------------------------------- */

static const shape_t EW_SHAPES[] = {
    { 0, { 0 } }, { 1, { 1 } }, { 1, { 4099 } }, { 2, { 17, 33 } }, { 4, { 3, 5, 7, 2 } }, { 3, { 2, 0, 3 } },
    { 2, { 257, 300 } }, { 8, { 2, 1, 3, 2, 2, 3, 1, 2 } },
};

typedef enum { EW_BINARY, EW_SCALAR, EW_UNARY } ew_kind;

/* One run of an elementwise op on both sides: layouts dk/ak/bk, dtypes, compared element by element. */
static void ew_case(const impl *im, int *fl__failed, int *fails, ew_kind kind, int op, double s, bool first,
                    const shape_t *sh, const fl_dtype dts[3], const int kinds[3], uint64_t seed) {
    const fl_device *cpu = fl_cpu_device();
    const int nt = kind == EW_BINARY ? 3 : 2;
    layout l[3];
    twin T[3];
    fl_tensor *vr[3] = { NULL, NULL, NULL }, *vg[3] = { NULL, NULL, NULL };
    for (int k = 0; k < nt; k++) {
        int64_t n = make_layout(&l[k], kinds[k], sh->ndim, sh->shape);
        void *codes = malloc((size_t)n * 4);
        gen_codes(codes, dts[k], n, seed * 7 + (uint64_t)k, true);
        fl_status st = twin_make(&T[k], im, dts[k], n, codes);
        free(codes);
        REQUIRE(st == FL_OK, "buffers: %s", fl_last_error());
        vr[k] = view_of(T[k].ref, &l[k]);
        vg[k] = view_of(T[k].got, &l[k]);
    }
    fl_status rs, gs;
    if (kind == EW_BINARY) {
        rs = cpu->binary((fl_binop)op, vr[0], vr[1], vr[2]);
        gs = im->binary((fl_binop)op, vg[0], vg[1], vg[2]);
    } else if (kind == EW_SCALAR) {
        rs = cpu->binary_scalar((fl_binop)op, vr[0], vr[1], s, first);
        gs = im->binary_scalar((fl_binop)op, vg[0], vg[1], s, first);
    } else {
        rs = cpu->unary((fl_unop)op, vr[0], vr[1]);
        gs = im->unary((fl_unop)op, vg[0], vg[1]);
    }
    char sb[100], what[400];
    const char *opname = kind == EW_UNARY ? fl_unop_names[op] : fl_binop_names[op];
    snprintf(what, sizeof what, "%s: %s%s, dst %s %s, a %s %s, b %s %s, s = %g, shape %s", im->name, opname,
             kind == EW_SCALAR ? (first ? " (scalar first)" : " (scalar second)") : "", dtn(dts[0]), LNAME[kinds[0]],
             dtn(dts[1]), LNAME[kinds[1]], nt == 3 ? dtn(dts[2]) : "-", nt == 3 ? LNAME[kinds[2]] : "-", s,
             shape_s(sb, sizeof sb, sh));
    if (rs != FL_OK || gs != FL_OK) {
        CHECK(0, "%s: status cpu %d, %s %d: %s", what, (int)rs, im->name, (int)gs, fl_last_error());
        ++*fails;
    } else {
        /* pow, sin, cos, erf, log1p, expm1, atan2: double on both sides, but CUDA's double functions are not
         * glibc's (≤ 2 ulp of a double), which can move the one rounding to fp32: 1 ulp; exp, log, tanh and
         * sigmoid: cpu_vmath.h's fp32 code, ported: bit for bit */
        bool dbl = op == FL_OP_SIN ||
                   op == FL_OP_COS || op == FL_OP_ERF || op == FL_OP_LOG1P || op == FL_OP_EXPM1 ||
                   (op >= FL_OP_TAN && op <= FL_OP_EXP2);
        int ulps = (kind == EW_UNARY && dbl) ||
                   (kind != EW_UNARY && (op == FL_OP_POW || op == FL_OP_ATAN2)) ? 1 : 0;
        int64_t first_bad = 0;
        uint32_t cc[2];
        int64_t bad = compare_twin(&T[0], ulps, NAN_ANY, &first_bad, cc);
        if (bad != 0) {
            CHECK(0, "%s: %lld of %lld destination elements differ (first at %lld: 0x%x vs cpu 0x%x)", what,
                  (long long)bad, (long long)T[0].n, (long long)first_bad, cc[0], cc[1]);
            ++*fails;
        }
    }
    for (int k = 0; k < nt; k++) { fl_tensor_release(vr[k]); fl_tensor_release(vg[k]); twin_free(&T[k]); }
}

static void binary_suite(const impl *im, int *fl__failed) {
    static const fl_dtype triples[][3] = {   /* dst, a, b */
        { FL_F32, FL_F32, FL_F32 }, { FL_BF16, FL_BF16, FL_BF16 }, { FL_F16, FL_F16, FL_F16 }, { FL_F32, FL_BF16, FL_F16 },
        { FL_F32, FL_F32, FL_BF16 }, { FL_BF16, FL_F32, FL_F32 }, { FL_E5M2, FL_E5M2, FL_E5M2 } };
    static const int combos[][3] = {
        { L_CONTIG, L_CONTIG, L_CONTIG },        /* flat, vectorised */
        { L_OFFSET, L_OFFSET, L_OFFSET },        /* flat, misaligned */
        { L_CONTIG, L_OFFSET, L_CONTIG },
        { L_CONTIG, L_CONTIG, L_BCAST },
        { L_CONTIG, L_BCAST_INNER, L_CONTIG },
        { L_TRANSPOSED, L_CONTIG, L_TRANSPOSED },
        { L_PADDED, L_PERMUTED, L_BCAST },
        { L_PERMUTED, L_PADDED, L_TRANSPOSED },
        { L_CONTIG, L_BCAST, L_BCAST } };
    int fails = 0;
    uint64_t seed = 1;
    for (size_t si = 0; si < sizeof EW_SHAPES / sizeof EW_SHAPES[0]; si++)
        for (size_t ti = 0; ti < sizeof triples / sizeof triples[0]; ti++)
            for (int op = 0; op < FL_BINOP_COUNT; op++)
                for (size_t ci = 0; ci < sizeof combos / sizeof combos[0]; ci++) {
                    if (numel_of(&EW_SHAPES[si]) > 10000 && (ci + (size_t)op) % 3 != 0) continue;
                    ew_case(im, fl__failed, &fails, EW_BINARY, op, 0.0, false, &EW_SHAPES[si], triples[ti],
                            combos[ci], seed++);
                    if (fails > 8) return;
                }
}

static void scalar_unary_suite(const impl *im, int *fl__failed) {
    static const fl_dtype pairs[][3] = {   /* dst, a */
        { FL_F32, FL_F32 }, { FL_BF16, FL_BF16 }, { FL_F16, FL_F16 }, { FL_F32, FL_BF16 }, { FL_F16, FL_F32 },
        { FL_E4M3, FL_E4M3 } };
    static const int combos[][3] = { { L_CONTIG, L_CONTIG }, { L_OFFSET, L_OFFSET }, { L_CONTIG, L_OFFSET },
                                     { L_TRANSPOSED, L_CONTIG }, { L_PADDED, L_BCAST }, { L_CONTIG, L_PERMUTED } };
    /* 0.1 and -2.7: not fp32 numbers (the CPU rounds the double first); 1e-40: an fp32 subnormal; 1e300: inf */
    const double scalars[] = { 2.5, 0.1, -2.7, 1e-40, 1e300, -0.0, 3.0 };
    int fails = 0;
    uint64_t seed = 5000;
    for (size_t si = 0; si < sizeof EW_SHAPES / sizeof EW_SHAPES[0]; si++)
        for (size_t pi = 0; pi < sizeof pairs / sizeof pairs[0]; pi++)
            for (size_t ci = 0; ci < sizeof combos / sizeof combos[0]; ci++) {
                bool big = numel_of(&EW_SHAPES[si]) > 10000;
                for (int op = 0; op < FL_BINOP_COUNT; op++)
                    for (int f = 0; f < 2; f++) {
                        if (big && (ci + (size_t)op + (size_t)f) % 4 != 0) continue;
                        double s = scalars[(seed + (uint64_t)op) % (sizeof scalars / sizeof scalars[0])];
                        ew_case(im, fl__failed, &fails, EW_SCALAR, op, s, f != 0, &EW_SHAPES[si], pairs[pi],
                                combos[ci], seed++);
                    }
                for (int op = 0; op < FL_UNOP_COUNT; op++) {
                    if (big && (ci + (size_t)op) % 3 != 0) continue;
                    ew_case(im, fl__failed, &fails, EW_UNARY, op, 0.0, false, &EW_SHAPES[si], pairs[pi], combos[ci],
                            seed++);
                }
                if (fails > 8) return;
            }
}

/* ---- reductions ------------------------------------------------------------------------------------- */

typedef struct { shape_t s; bool big; } rshape;
static const rshape RSHAPES[] = {
    { { 0, { 0 } }, false }, { { 1, { 1 } }, false }, { { 1, { 7 } }, false },
    { { 1, { 10000 } }, false },            /* one row in 3 chunks */
    { { 2, { 3, 70000 } }, false },         /* dim 1: rows of 18 chunks; dim 0: 70000 columns */
    { { 2, { 5000, 3 } }, false },          /* dim 0: 3 columns in 157 chunks; dim 1: warp-sized rows */
    { { 3, { 2, 3, 4 } }, false }, { { 3, { 4, 0, 3 } }, false }, { { 2, { 3, 0 } }, false },
    { { 2, { 300, 1025 } }, false },        /* block-sized rows */
    { { 2, { 1024, 5000 } }, true },        /* enough rows: no split */
    { { 1, { 2500000 } }, true },           /* 611 chunks: the combining pass uses a block */
    { { 2, { 16, 300000 } }, true },
};

/* Per output of reducing the contiguous values x (as [outer, size, inner]): Σ|x| for the tolerance. */
static void abs_sums(const double *x, int64_t outer, int64_t size, int64_t inner, double *out) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            double s = 0;
            for (int64_t k = 0; k < size; k++) s += fabs(x[(o * size + k) * inner + j]);
            out[o * inner + j] = s;
        }
}

static void reduce_case(const impl *im, int *fl__failed, int *fails, const rshape *rs, int dim, fl_redop op,
                        fl_dtype dt, int kind, int variant, uint64_t seed) {
    const fl_device *cpu = fl_cpu_device();
    const shape_t *sh = &rs->s;
    layout l;
    int64_t n = make_layout(&l, kind, sh->ndim, sh->shape), numel = numel_of(sh);
    void *codes = malloc((size_t)n * 4 + 4);
    gen_codes(codes, dt, n, seed, false);
    if (variant == 1 && n > 0) set_code(codes, dt, n / 2, encode(NAN, dt));         /* NaN somewhere */
    if (variant == 2 && n > 0) set_code(codes, dt, (n * 2) / 3, encode(-INFINITY, dt));
    twin A;
    fl_status st = twin_make(&A, im, dt, n, codes);
    free(codes);
    REQUIRE(st == FL_OK, "buffers: %s", fl_last_error());
    fl_tensor *ar = view_of(A.ref, &l), *ag = view_of(A.got, &l);
    int64_t outer = 1, size = numel, inner = 1;
    int64_t kshape[FL_MAX_DIMS];
    int kn = 1;
    kshape[0] = 1;
    if (dim >= 0) {
        size = sh->shape[dim];
        for (int i = 0; i < dim; i++) outer *= sh->shape[i];
        for (int i = dim + 1; i < sh->ndim; i++) inner *= sh->shape[i];
        kn = sh->ndim;
        for (int i = 0; i < kn; i++) kshape[i] = i == dim ? 1 : sh->shape[i];
    }
    const int64_t nout = outer * inner;
    fl_tensor *dr = NULL, *dg = NULL;
    REQUIRE(fl_tensor_empty(&dr, dt, kn, kshape, FL_DEV_CPU) == FL_OK &&
            fl_tensor_empty(&dg, dt, kn, kshape, im->dev) == FL_OK, "results: %s", fl_last_error());
    fl_status rs_ = cpu->reduce(op, dr, ar, dim), gs = im->reduce(op, dg, ag, dim);
    char sb[100];
    if (rs_ != FL_OK || gs != FL_OK) {
        CHECK(0, "%s: %s dim %d of %s %s: status cpu %d, %s %d: %s", im->name, fl_redop_names[op], dim,
              shape_s(sb, sizeof sb, sh), dtn(dt), (int)rs_, im->name, (int)gs, fl_last_error());
        ++*fails;
    } else if (nout > 0) {
        void *got = malloc((size_t)nout * 4);
        const void *ref = fl_tensor_data(dr);
        REQUIRE(get_bytes(dg, got, (size_t)nout * esz(dt)) == FL_OK, "read back: %s", fl_last_error());
        int64_t bad = 0, first = 0;
        if (op == FL_OP_MAX || op == FL_OP_MIN || op == FL_OP_AMAX) {
            /* exact; the sign of a zero max/min depends on which zero comes first in the CPU's SIMD order */
            bad = compare_codes(got, ref, dt, nout, 0, NAN_ANY | ZERO_ANY, &first);
        } else {
            /* Both sides sum in double, in different orders: each double sum is within count·2^-53·Σ|x| of the
             * exact one, then one rounding to fp32 and one to dt (ulp ≤ 2^-mant·|r|, plus fp16's subnormal step). */
            fl_tensor *c = NULL;
            REQUIRE(fl_tensor_contiguous(&c, ar) == FL_OK, "contiguous: %s", fl_last_error());
            double *x = malloc((size_t)(numel ? numel : 1) * sizeof(double)), *sabs = malloc((size_t)nout * sizeof(double));
            for (int64_t i = 0; i < numel; i++) x[i] = decode(code_at(fl_tensor_data(c), dt, i), dt);
            abs_sums(x, outer, size, inner, sabs);
            for (int64_t q = 0; q < nout; q++) {
                uint32_t g = code_at(got, dt, q), r = code_at(ref, dt, q);
                if (g == r || (code_is_nan(g, dt) && code_is_nan(r, dt))) continue;
                double gv = decode(g, dt), rv = decode(r, dt);
                if (!isfinite(gv) || !isfinite(rv) || isnan(gv) || isnan(rv)) { if (!bad) first = q; bad++; continue; }
                double sum_err = 2.0 * (double)size * 0x1p-53 * sabs[q] / (op == FL_OP_MEAN && size ? (double)size : 1.0);
                double tol = sum_err + 2.0 * ulp_rel(FL_F32) * fabs(rv) + ulp_rel(dt) * fabs(rv) + (dt == FL_F16 ? 0x1p-24 : 0.0);
                if (!(fabs(gv - rv) <= tol)) { if (!bad) first = q; bad++; }
            }
            free(x); free(sabs);
            fl_tensor_release(c);
        }
        if (bad) {
            CHECK(0, "%s: %s dim %d of %s %s %s (variant %d): %lld of %lld outputs differ, first %lld: %.9g vs cpu %.9g",
                  im->name, fl_redop_names[op], dim, LNAME[kind], shape_s(sb, sizeof sb, sh), dtn(dt), variant,
                  (long long)bad, (long long)nout, (long long)first, decode(code_at(got, dt, first), dt),
                  decode(code_at(ref, dt, first), dt));
            ++*fails;
        }
        free(got);
    }
    fl_tensor_release(dr); fl_tensor_release(dg); fl_tensor_release(ar); fl_tensor_release(ag);
    twin_free(&A);
}

static void reduce_suite(const impl *im, int *fl__failed) {
    static const fl_dtype dts[] = { FL_F32, FL_BF16, FL_F16, FL_E4M3 };
    static const int kinds[] = { L_CONTIG, L_TRANSPOSED, L_PADDED };
    int fails = 0;
    uint64_t seed = 9000;
    for (size_t si = 0; si < sizeof RSHAPES / sizeof RSHAPES[0]; si++) {
        const rshape *rs = &RSHAPES[si];
        for (int dim = -1; dim < rs->s.ndim; dim++)
            for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++)
                for (int op = 0; op < FL_REDOP_COUNT; op++)
                    for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++)
                        for (int variant = 0; variant < 3; variant++) {
                            const fl_dtype dt = dts[di];
                            const bool minmax = op == FL_OP_MAX || op == FL_OP_MIN || op == FL_OP_AMAX;
                            if (dt == FL_E4M3 && (!minmax || rs->big)) continue;   /* sums of FP8 codes: not an op */
                            if (rs->big && (dt != FL_F32 || ki > 0 || variant > 0 || (op != FL_OP_SUM && op != FL_OP_MAX)))
                                continue;
                            if (variant > 0 && (ki > 0 || (op == FL_OP_MEAN))) continue;
                            /* medium sizes: every path once per dtype, not every combination */
                            if (numel_of(&rs->s) > 50000 && ((dt != FL_F32 && (ki > 0 || variant > 0)) || dt == FL_F16))
                                continue;
                            reduce_case(im, fl__failed, &fails, rs, dim, (fl_redop)op, dt, kinds[ki], variant, seed++);
                            if (fails > 8) return;
                        }
    }
}

/* Each size and dtype alone against the exact sum and the CPU's, then all of them in one call (one wait on the
 * device): each sum the same bits as alone. */
static void sumsq_suite(const impl *im, int *fl__failed) {
    enum { NS = 5, ND = 3 };
    const fl_device *cpu = fl_cpu_device();
    const int64_t sizes[NS] = { 0, 1, 1000, 70001, 3000000 };
    const fl_dtype dts[ND] = { FL_F32, FL_BF16, FL_F16 };
    twin T[NS * ND];
    fl_tensor *gs[NS * ND] = { NULL };
    double alone[NS * ND], batch[NS * ND];
    int made = 0;
    for (size_t si = 0; si < NS; si++)
        for (size_t di = 0; di < ND; di++, made++) {
            int64_t n = sizes[si], nb = n ? n : 1;
            void *codes = malloc((size_t)nb * 4);
            gen_codes(codes, dts[di], nb, 77 + si, false);
            REQUIRE_OK(twin_make(&T[made], im, dts[di], nb, codes));
            layout l;
            make_layout(&l, L_CONTIG, 1, &n);
            fl_tensor *r = view_of(T[made].ref, &l), *g = view_of(T[made].got, &l);
            gs[made] = g;
            double want = 0, mag = 0, got = -1, cpu_got = 0;
            for (int64_t i = 0; i < n; i++) { double v = decode(code_at(codes, dts[di], i), dts[di]); want += v * v; mag += v * v; }
            REQUIRE_OK(im->sumsq((const fl_tensor *const *)&g, 1, &got));
            alone[made] = got;
            /* all terms ≥ 0: each order's double sum is within n·2^-53 of the exact sum, relatively */
            double tol = 2.0 * (double)n * 0x1p-53 * mag;
            CHECK(got == want || fabs(got - want) <= tol, "%s: sumsq of %lld %s: %.17g vs %.17g", im->name, (long long)n,
                  dtn(dts[di]), got, want);
            if (cpu->sumsq) {
                REQUIRE_OK(cpu->sumsq((const fl_tensor *const *)&r, 1, &cpu_got));
                CHECK(got == cpu_got || fabs(got - cpu_got) <= tol, "%s: sumsq of %lld %s: %.17g vs cpu %.17g", im->name, (long long)n,
                      dtn(dts[di]), got, cpu_got);
            }
            fl_tensor_release(r);
            free(codes);
        }
    for (int i = 0; i < made; i++) batch[i] = -1.0;
    REQUIRE_OK(im->sumsq((const fl_tensor *const *)gs, made, batch));
    for (int i = 0; i < made; i++)
        CHECK(batch[i] == alone[i], "%s: sumsq of tensor %d in one call: %.17g, alone %.17g", im->name, i, batch[i], alone[i]);
    for (int i = 0; i < made; i++) { fl_tensor_release(gs[i]); twin_free(&T[i]); }
}

/* ---- matmul ----------------------------------------------------------------------------------------- */

typedef struct { int64_t B, M, K, N; bool a_col, b_col, a_bc, b_bc; } mm_case;
static const mm_case MM_CASES[] = {
    { 1, 1, 1, 1, false, false, false, false },
    { 3, 37, 65, 19, false, false, false, false },
    { 3, 37, 65, 19, true, false, false, false },
    { 3, 37, 65, 19, false, true, false, false },
    { 3, 37, 65, 19, true, true, false, false },
    { 4, 128, 256, 64, false, true, false, true },    /* x · Wᵀ with one W for the batch: a linear layer */
    { 5, 16, 8, 33, true, false, true, false },
    { 2, 1, 300, 1, false, false, false, false },
    { 2, 64, 32, 48, false, false, false, true },
    { 1, 200, 3, 5, true, true, false, false },
    { 6, 7, 5, 3, false, true, true, false },
    { 3, 8, 16, 5, false, false, true, true },       /* both broadcast: batch stride 0 on a and b */
};
static const fl_dtype MM_DTYPES[][2] = { { FL_F32, FL_F32 }, { FL_BF16, FL_BF16 }, { FL_BF16, FL_F32 },
                                         { FL_F16, FL_F16 }, { FL_F16, FL_F32 } };   /* inputs, result */

/* Operand [B, r, c]: row- or column-major entries, batch stride r·c or 0. */
static int64_t mm_layout(layout *l, int64_t B, int64_t r, int64_t c, bool col, bool bc) {
    memset(l, 0, sizeof *l);
    l->ndim = 3;
    l->shape[0] = B; l->shape[1] = r; l->shape[2] = c;
    l->stride[0] = bc ? 0 : r * c;
    l->stride[1] = col ? 1 : c;
    l->stride[2] = col ? r : 1;
    return (bc ? 1 : B) * r * c;
}

typedef struct { twin A, Bm, D; fl_tensor *ar, *ag, *br, *bg, *dr, *dg; layout la, lb, ld; } mm_env;

static fl_status mm_setup(mm_env *e, const impl *im, const mm_case *c, fl_dtype in, fl_dtype out, uint64_t seed) {
    memset(e, 0, sizeof *e);
    int64_t na = mm_layout(&e->la, c->B, c->M, c->K, c->a_col, c->a_bc);
    int64_t nb = mm_layout(&e->lb, c->B, c->K, c->N, c->b_col, c->b_bc);
    int64_t nd = mm_layout(&e->ld, c->B, c->M, c->N, false, false);
    void *ca = malloc((size_t)na * 4 + 4), *cb = malloc((size_t)nb * 4 + 4), *cd = malloc((size_t)nd * 4 + 4);
    float *x = malloc((size_t)(na > nb ? na : nb) * 4 + 4);
    fl_rng r;
    fl_rng_seed(&r, seed);
    fl_rng_normal(&r, x, (size_t)na, 0.0f, 1.0f);
    for (int64_t i = 0; i < na; i++) set_code(ca, in, i, encode(x[i], in));
    fl_rng_normal(&r, x, (size_t)nb, 0.0f, 1.0f);
    for (int64_t i = 0; i < nb; i++) set_code(cb, in, i, encode(x[i], in));
    gen_codes(cd, out, nd, seed + 1, true);   /* garbage the GEMM must overwrite */
    fl_status st = twin_make(&e->A, im, in, na, ca);
    if (st == FL_OK) st = twin_make(&e->Bm, im, in, nb, cb);
    if (st == FL_OK) st = twin_make(&e->D, im, out, nd, cd);
    free(ca); free(cb); free(cd); free(x);
    FL_TRY(st);
    e->ar = view_of(e->A.ref, &e->la); e->ag = view_of(e->A.got, &e->la);
    e->br = view_of(e->Bm.ref, &e->lb); e->bg = view_of(e->Bm.got, &e->lb);
    e->dr = view_of(e->D.ref, &e->ld); e->dg = view_of(e->D.got, &e->ld);
    return e->ar && e->ag && e->br && e->bg && e->dr && e->dg ? FL_OK : FL_ERR(FL_EINVAL, "views");
}

static void mm_free(mm_env *e) {
    fl_tensor *ts[6] = { e->ar, e->ag, e->br, e->bg, e->dr, e->dg };
    for (int i = 0; i < 6; i++) fl_tensor_release(ts[i]);
    twin_free(&e->A); twin_free(&e->Bm); twin_free(&e->D);
}

/* Element (z, i, j) of a CPU 3-d view, decoded. */
static double at3(const fl_tensor *t, int64_t z, int64_t i, int64_t j) {
    return decode(code_at(fl_tensor_data(t), t->dtype, z * t->stride[0] + i * t->stride[1] + j * t->stride[2]), t->dtype);
}

/* Compares a [B, M, N] result (codes `got`) with the CPU's: |g − r| ≤ K·2^-23·Σ|a·b| (two fp32
 * accumulations of K products in different orders) + one rounding of the result dtype. */
static int64_t mm_compare(const mm_env *e, const mm_case *c, const void *got, int64_t *first) {
    const fl_dtype out = e->dr->dtype;
    int64_t bad = 0;
    for (int64_t z = 0; z < c->B; z++)
        for (int64_t i = 0; i < c->M; i++)
            for (int64_t j = 0; j < c->N; j++) {
                double mag = 0;
                for (int64_t k = 0; k < c->K; k++) mag += fabs(at3(e->ar, z, i, k) * at3(e->br, z, k, j));
                int64_t q = (z * c->M + i) * c->N + j;
                double g = decode(code_at(got, out, q), out), r = decode(code_at(fl_tensor_data(e->dr), out, q), out);
                double tol = (double)c->K * 0x1p-23 * mag + 2.0 * ulp_rel(out) * fabs(r) + (out == FL_F16 ? 0x1p-24 : 0.0);
                if (!(fabs(g - r) <= tol)) { if (!bad) *first = q; bad++; }
            }
    return bad;
}

/* gemm_lt.h's row-major semantics, run literally on host memory: what the GPU GEMM will compute from
 * the arguments matmul.cu builds. */
static void gemm_on_host(const fl_cuda_gemm_args *g) {
    int64_t nb = g->batch > 1 ? g->batch : 1;
    for (int64_t z = 0; z < nb; z++)
        for (int64_t m = 0; m < g->m; m++)
            for (int64_t n = 0; n < g->n; n++) {
                double acc = 0;
                for (int64_t k = 0; k < g->k; k++) {
                    int64_t ia = (nb > 1 ? z * g->stride_a : 0) + (g->a_trans ? k * g->lda + m : m * g->lda + k);
                    int64_t ib = (nb > 1 ? z * g->stride_b : 0) + (g->b_trans ? k * g->ldb + n : n * g->ldb + k);
                    acc += decode(code_at(g->a, g->a_dtype, ia), g->a_dtype) * decode(code_at(g->b, g->b_dtype, ib), g->b_dtype);
                }
                int64_t id = (nb > 1 ? z * g->stride_d : 0) + m * g->ldd + n;
                set_code(g->d, g->d_dtype, id, encode((float)acc, g->d_dtype));
            }
}

/* ---- tests that run the device code on the host ------------------------------------------------------ */

/* The bf16 rounding and fp16 widening the kernels use, against format.c over every fp16 code and 3·2^20
 * fp32 patterns (all exponents, ties, NaN payloads, subnormals, infinities). */
TEST(gpu_ops_bf16_f16_codecs_match_format_on_host) {
    int bad = 0;
    for (uint32_t hi = 0; hi < (1u << 20); hi++) {
        uint32_t lows[3] = { 0, 0x800u, (hi * 2654435761u) & 0xfffu };
        for (int k = 0; k < 3; k++) {
            float x = from_bits((hi << 12) | lows[k]);
            uint16_t g = fl_cuda_f32_to_bf16_host(x), c = fl_f32_to_bf16(x);
            if (g != c && bad++ < 5) CHECK(0, "bf16 of %a (0x%08x): 0x%04x vs format.c 0x%04x", x, bits_of(x), g, c);
        }
    }
    const uint32_t ties[] = { 0x3f808000u, 0x3f818000u, 0x7f7f8000u, 0x7f7fffffu, 0x00008000u, 0x80018000u };
    for (size_t i = 0; i < sizeof ties / sizeof ties[0]; i++)
        if (fl_cuda_f32_to_bf16_host(from_bits(ties[i])) != fl_f32_to_bf16(from_bits(ties[i])) && bad++ < 5)
            CHECK(0, "bf16 tie 0x%08x", ties[i]);
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t g = bits_of(fl_cuda_f16_to_f32_host((uint16_t)h)), c = bits_of(fl_f16_to_f32((uint16_t)h));
        if (g != c && bad++ < 10) CHECK(0, "fp16 0x%04x: 0x%08x vs format.c 0x%08x", h, g, c);
    }
    CHECK(bad == 0, "%d codec mismatches", bad);
}

/* exp and log, cpu_vmath.h's code and its port in cuda_common.cuh, at the points where their paths part, which the
 * suites' random values reach by chance only: 65 floats either side of exp's overflow (88.72), of where its results
 * turn subnormal (-87.34) and vanish (-103.97, -104), of √½ (log's reduction), 1 and √2; every power of two (±,
 * normal and subnormal) with its two neighbours; 0, FLT_MAX and the infinities; and every 4099th float pattern
 * (every exponent, NaN payloads of both signs). Bit for bit (NaNs as NaNs); the whole of the floats was compared once
 * by hand, 2026-12-06 (stop 94). */
TEST(gpu_exp_log_device_code_matches_cpu_at_the_edges_on_host) {
    const uint32_t centres[] = { 0x42b17218u, 0xc2aeac50u, 0xc2cff1b5u, 0xc2d00000u, 0x3f3504f3u, 0x3f800000u,
                                 0x3fb504f3u, 0x00000000u, 0x7f7fffffu, 0x7f800000u };
    const int64_t cap = (int64_t)(sizeof centres / sizeof centres[0]) * 2 * 131 + 2 * 277 * 3 + (1 << 20);
    float *x = malloc((size_t)cap * sizeof(float));
    REQUIRE(x, "out of memory");
    int64_t k = 0;
    for (size_t c = 0; c < sizeof centres / sizeof centres[0]; c++)
        for (int sg = 0; sg < 2; sg++)
            for (int d = -65; d <= 65; d++) x[k++] = from_bits((centres[c] ^ (sg ? 0x80000000u : 0u)) + (uint32_t)d);
    for (int e = 0; e < 277; e++)   /* 2^-149 .. 2^127 */
        for (int sg = 0; sg < 2; sg++) {
            const float p = ldexpf(sg ? -1.0f : 1.0f, e - 149);
            x[k++] = p; x[k++] = nextafterf(p, 0.0f); x[k++] = nextafterf(p, sg ? -INFINITY : INFINITY);
        }
    for (uint64_t u = 0; u < (1ull << 32); u += 4099) x[k++] = from_bits((uint32_t)u);   /* 1,047,810 */
    const int64_t n = k;
    fl_tensor *t = NULL, *r = NULL, *g = NULL;
    REQUIRE_OK(fl_tensor_empty(&t, FL_F32, 1, &n, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&r, FL_F32, 1, &n, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&g, FL_F32, 1, &n, FL_DEV_CPU));
    memcpy(fl_tensor_data(t), x, (size_t)n * sizeof(float));
    const fl_unop ops[2] = { FL_OP_EXP, FL_OP_LOG };
    for (int o = 0; o < 2; o++) {
        REQUIRE_OK(fl_cpu_device()->unary(ops[o], r, t));
        REQUIRE_OK(HOST_RUN.unary(ops[o], g, t));
        const float *rv = fl_tensor_data(r), *gv = fl_tensor_data(g);
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < n; i++)
            if (bits_of(rv[i]) != bits_of(gv[i]) && !(isnan(rv[i]) && isnan(gv[i])) && bad++ == 0) first = i;
        CHECK(bad == 0, "%s: %lld of %lld values differ (first x = %a: cpu 0x%08x, host run 0x%08x)",
              fl_unop_names[ops[o]], (long long)bad, (long long)n, first < 0 ? 0.0 : (double)x[first],
              first < 0 ? 0u : bits_of(rv[first]), first < 0 ? 0u : bits_of(gv[first]));
    }
    fl_tensor_release(t); fl_tensor_release(r); fl_tensor_release(g);
    free(x);
}

TEST(gpu_copy_device_code_matches_cpu_on_host) { copy_suite(&HOST_RUN, fl__failed); }
TEST(gpu_fill_device_code_matches_cpu_on_host) { fill_suite(&HOST_RUN, fl__failed); }
TEST(gpu_binary_device_code_matches_cpu_on_host) { binary_suite(&HOST_RUN, fl__failed); }
TEST(gpu_scalar_unary_device_code_matches_cpu_on_host) { scalar_unary_suite(&HOST_RUN, fl__failed); }
TEST(gpu_reduce_device_code_matches_cpu_on_host) { reduce_suite(&HOST_RUN, fl__failed); }
TEST(gpu_sumsq_device_code_matches_cpu_on_host) { sumsq_suite(&HOST_RUN, fl__failed); }

/* The GEMM arguments matmul.cu derives from each operand layout, computed literally per gemm_lt.h on the
 * host, against the CPU device's matmul: proves the layout mapping without a GPU. */
TEST(gpu_matmul_gemm_arguments_match_cpu_on_host) {
    const fl_device *cpu = fl_cpu_device();
    for (size_t ci = 0; ci < sizeof MM_CASES / sizeof MM_CASES[0]; ci++)
        for (size_t di = 0; di < sizeof MM_DTYPES / sizeof MM_DTYPES[0]; di++) {
            const mm_case *c = &MM_CASES[ci];
            mm_env e;
            REQUIRE_OK(mm_setup(&e, &HOST_RUN, c, MM_DTYPES[di][0], MM_DTYPES[di][1], 40 + ci));
            fl_cuda_gemm_args g;
            REQUIRE_OK(fl_cuda_matmul_args_host(e.dg, e.ag, e.bg, &g));
            CHECK(!g.tf32 && !g.bias && !g.d_amax && !g.accumulate, "case %zu: extra GEMM options", ci);
            CHECK(c->B > 1 ? g.batch == c->B : g.batch <= 1, "case %zu: batch %lld", ci, (long long)g.batch);
            gemm_on_host(&g);
            REQUIRE_OK(cpu->matmul(e.dr, e.ar, e.br));
            size_t bytes = (size_t)(c->B * c->M * c->N) * esz(MM_DTYPES[di][1]);
            void *got = malloc(bytes + 1);
            REQUIRE_OK(get_bytes(e.dg, got, bytes));
            int64_t first = 0, bad = mm_compare(&e, c, got, &first);
            CHECK(bad == 0, "case %zu [%lld, %lld, %lld] x [%lld, %lld, %lld]%s%s%s%s %s -> %s: %lld outputs differ (first %lld)",
                  ci, (long long)c->B, (long long)c->M, (long long)c->K, (long long)c->B, (long long)c->K,
                  (long long)c->N, c->a_col ? " a col-major" : "", c->b_col ? " b col-major" : "",
                  c->a_bc ? " a broadcast" : "", c->b_bc ? " b broadcast" : "", dtn(MM_DTYPES[di][0]),
                  dtn(MM_DTYPES[di][1]), (long long)bad, (long long)first);
            free(got);
            mm_free(&e);
        }
}

/* Argument checks that run before any CUDA call: the same answers with or without a GPU. */
TEST(gpu_ops_entries_reject_bad_arguments) {
    int64_t s23[2] = { 2, 3 }, s32[2] = { 3, 2 }, s6 = 6;
    fl_tensor *a = NULL, *b = NULL, *c = NULL, *q = NULL, *m3 = NULL;
    REQUIRE_OK(fl_tensor_zeros(&a, FL_F32, 2, s23, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_zeros(&b, FL_F32, 2, s23, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_zeros(&c, FL_F32, 2, s32, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&q, FL_E4M3, 1, &s6, FL_DEV_CPU));
    /* CPU tensors handed to the CUDA entries */
    CHECK(fl_cuda_dev_copy(a, b) == FL_EINVAL && strstr(fl_last_error(), "expected cuda"), "%s", fl_last_error());
    CHECK(fl_cuda_dev_fill(a, 1.0) == FL_EINVAL, "fill: %s", fl_last_error());
    CHECK(fl_cuda_dev_binary(FL_OP_ADD, a, a, b) == FL_EINVAL, "binary: %s", fl_last_error());
    CHECK(fl_cuda_dev_binary_scalar(FL_OP_MUL, a, a, 2.0, false) == FL_EINVAL, "scalar: %s", fl_last_error());
    CHECK(fl_cuda_dev_unary(FL_OP_EXP, a, a) == FL_EINVAL, "unary: %s", fl_last_error());
    CHECK(fl_cuda_dev_reduce(FL_OP_SUM, a, a, 0) == FL_EINVAL, "reduce: %s", fl_last_error());
    double d = 0;
    CHECK(fl_cuda_dev_sumsq((const fl_tensor *const *)&a, 1, &d) == FL_EINVAL, "sumsq: %s", fl_last_error());
    /* the host runs share the checks */
    CHECK(fl_cuda_copy_host(a, c) == FL_EINVAL && strstr(fl_last_error(), "shape"), "shape: %s", fl_last_error());
    CHECK(fl_cuda_binary_host(FL_OP_ADD, a, a, c) == FL_EINVAL, "binary shape: %s", fl_last_error());
    CHECK(fl_cuda_binary_host(FL_BINOP_COUNT, a, a, b) == FL_EINVAL, "unknown op: %s", fl_last_error());
    CHECK(fl_cuda_unary_host((fl_unop)-1, a, a) == FL_EINVAL, "unknown unop: %s", fl_last_error());
    CHECK(fl_cuda_reduce_host((fl_redop)9, a, a, 0) == FL_EINVAL, "unknown reduction: %s", fl_last_error());
    CHECK(fl_cuda_reduce_host(FL_OP_SUM, a, a, 0) == FL_EINVAL && strstr(fl_last_error(), "keepdim"), "%s", fl_last_error());
    CHECK(fl_cuda_sumsq_host((const fl_tensor *const *)&q, 1, &d) == FL_EINVAL, "sumsq of e4m3: %s", fl_last_error());
    fl_tensor *t = NULL;
    REQUIRE_OK(fl_tensor_transpose(&t, a, 0, 1));
    CHECK(fl_cuda_sumsq_host((const fl_tensor *const *)&t, 1, &d) == FL_EINVAL, "sumsq of a transposed tensor: %s",
          fl_last_error());
    CHECK(fl_cuda_fill_host(t, 1.0) == FL_EINVAL, "fill of a transposed tensor: %s", fl_last_error());
    /* matmul: 3-d operands, one input dtype, row- or column-major entries */
    int64_t s3[3] = { 1, 2, 3 }, s3b[3] = { 1, 3, 2 }, s3d[3] = { 1, 2, 2 };
    fl_tensor *ma = NULL, *mb = NULL, *md = NULL, *mbh = NULL;
    REQUIRE_OK(fl_tensor_zeros(&ma, FL_F32, 3, s3, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_zeros(&mb, FL_F32, 3, s3b, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_zeros(&md, FL_F32, 3, s3d, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_zeros(&mbh, FL_BF16, 3, s3b, FL_DEV_CPU));
    fl_cuda_gemm_args g;
    CHECK(fl_cuda_dev_matmul(md, ma, mb) == FL_EINVAL, "cpu tensors: %s", fl_last_error());
    CHECK(fl_cuda_matmul_args_host(md, ma, mb, &g) == FL_OK, "a valid matmul: %s", fl_last_error());
    CHECK(fl_cuda_matmul_args_host(md, ma, mbh, &g) == FL_EINVAL, "mixed dtypes: %s", fl_last_error());
    CHECK(fl_cuda_matmul_args_host(md, a, mb, &g) == FL_EINVAL, "2-d a: %s", fl_last_error());
    CHECK(fl_cuda_matmul_args_host(md, mb, mb, &g) == FL_EINVAL, "shapes: %s", fl_last_error());
    ma->stride[1] = 2; ma->stride[2] = 2;   /* neither row- nor column-major */
    CHECK(fl_cuda_matmul_args_host(md, ma, mb, &g) == FL_EINVAL && strstr(fl_last_error(), "column-major"), "%s",
          fl_last_error());
    REQUIRE_OK(fl_tensor_empty(&m3, FL_E4M3, 3, s3, FL_DEV_CPU));
    CHECK(fl_cuda_matmul_args_host(md, m3, mb, &g) == FL_EINVAL, "e4m3 operand: %s", fl_last_error());
    fl_tensor *ts[] = { a, b, c, q, t, ma, mb, md, mbh, m3 };
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) fl_tensor_release(ts[i]);
}

/* Strided-batch argument checks of fl_cuda_gemm (before any CUDA call). The pointers are never read. */
TEST(gpu_gemm_strided_batch_rejects_bad_arguments) {
    void *fake = (void *)(uintptr_t)0x10000;
    fl_cuda_gemm_args g;
    fl_cuda_gemm_args_init(&g, 32, 32, 32);
    g.a = g.b = g.d = fake;
    g.batch = 4; g.stride_a = g.stride_b = g.stride_d = 32 * 32;
    g.bias = fake; g.bias_dtype = FL_F32;
    CHECK(fl_cuda_gemm(&g, NULL) == FL_EINVAL && strstr(fl_last_error(), "bias") && strstr(fl_last_error(), "batch"),
          "bias: %s", fl_last_error());
    g.bias = NULL; g.d_amax = (float *)fake;
    CHECK(fl_cuda_gemm(&g, NULL) == FL_EINVAL && strstr(fl_last_error(), "d_amax"), "d_amax: %s", fl_last_error());
    g.d_amax = NULL; g.a_dtype = g.b_dtype = FL_E4M3; g.d_dtype = FL_BF16;
    g.a_scale_inv = g.b_scale_inv = (const float *)fake;
    CHECK(fl_cuda_gemm(&g, NULL) == FL_EUNSUPPORTED && strstr(fl_last_error(), "FP8"), "fp8: %s", fl_last_error());
    g.a_dtype = g.b_dtype = g.d_dtype = FL_F32;
    g.stride_d = 0;
    CHECK(fl_cuda_gemm(&g, NULL) == FL_EINVAL && strstr(fl_last_error(), "stride_d"), "stride_d 0: %s", fl_last_error());
    g.stride_d = 1024; g.stride_a = -1;
    CHECK(fl_cuda_gemm(&g, NULL) == FL_EINVAL, "negative stride: %s", fl_last_error());
    g.stride_a = 0; g.batch = -2;
    CHECK(fl_cuda_gemm(&g, NULL) == FL_EINVAL && strstr(fl_last_error(), "batch"), "batch -2: %s", fl_last_error());
    g.batch = (int64_t)1 << 31;
    CHECK(fl_cuda_gemm(&g, NULL) == FL_EINVAL, "batch 2^31: %s", fl_last_error());
}

/* ---- the same on the GPU --------------------------------------------------------------------------- */

TEST(gpu_copy_matches_cpu) { if (gpu_or_skip()) copy_suite(&GPU_RUN, fl__failed); }
TEST(gpu_fill_matches_cpu) { if (gpu_or_skip()) fill_suite(&GPU_RUN, fl__failed); }
TEST(gpu_binary_matches_cpu) { if (gpu_or_skip()) binary_suite(&GPU_RUN, fl__failed); }
TEST(gpu_scalar_unary_matches_cpu) { if (gpu_or_skip()) scalar_unary_suite(&GPU_RUN, fl__failed); }
TEST(gpu_reduce_matches_cpu) { if (gpu_or_skip()) reduce_suite(&GPU_RUN, fl__failed); }
TEST(gpu_sumsq_matches_cpu) { if (gpu_or_skip()) sumsq_suite(&GPU_RUN, fl__failed); }

/* Same input, same bits: twice on the GPU, and equal to the host run of the same code (the trees and
 * chunks depend on the shape only; NaN payloads aside). */
TEST(gpu_reduce_is_deterministic_and_matches_host_run) {
    if (!gpu_or_skip()) return;
    const shape_t shapes[] = { { 1, { 2500000 } }, { 2, { 3, 70000 } }, { 2, { 5000, 3 } }, { 2, { 300, 1025 } } };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int dim = -1; dim < shapes[si].ndim; dim++)
            for (int op = 0; op < FL_REDOP_COUNT; op++) {
                const shape_t *sh = &shapes[si];
                int64_t n = numel_of(sh), outer = 1, inner = 1, kshape[FL_MAX_DIMS] = { 1 };
                int kn = 1;
                if (dim >= 0) {
                    kn = sh->ndim;
                    for (int i = 0; i < kn; i++) kshape[i] = i == dim ? 1 : sh->shape[i];
                    for (int i = 0; i < dim; i++) outer *= sh->shape[i];
                    for (int i = dim + 1; i < kn; i++) inner *= sh->shape[i];
                }
                int64_t nout = outer * inner;
                float *codes = malloc((size_t)n * 4);
                gen_codes(codes, FL_F32, n, 300 + si, false);
                twin host, dev;
                REQUIRE_OK(twin_make(&host, &HOST_RUN, FL_F32, n, codes));
                REQUIRE_OK(twin_make(&dev, &GPU_RUN, FL_F32, n, codes));
                layout l;
                make_layout(&l, L_CONTIG, sh->ndim, sh->shape);
                fl_tensor *xh = view_of(host.got, &l), *xg = view_of(dev.got, &l), *rh = NULL, *r1 = NULL, *r2 = NULL;
                REQUIRE_OK(fl_tensor_empty(&rh, FL_F32, kn, kshape, FL_DEV_CPU));
                REQUIRE_OK(fl_tensor_empty(&r1, FL_F32, kn, kshape, FL_DEV_CUDA));
                REQUIRE_OK(fl_tensor_empty(&r2, FL_F32, kn, kshape, FL_DEV_CUDA));
                REQUIRE_OK(fl_cuda_reduce_host((fl_redop)op, rh, xh, dim));
                REQUIRE_OK(fl_cuda_dev_reduce((fl_redop)op, r1, xg, dim));
                REQUIRE_OK(fl_cuda_dev_reduce((fl_redop)op, r2, xg, dim));
                float *g1 = malloc((size_t)nout * 4), *g2 = malloc((size_t)nout * 4);
                REQUIRE_OK(get_bytes(r1, g1, (size_t)nout * 4));
                REQUIRE_OK(get_bytes(r2, g2, (size_t)nout * 4));
                int64_t first = 0;
                CHECK(memcmp(g1, g2, (size_t)nout * 4) == 0, "%s dim %d of [%lld...]: two GPU runs differ",
                      fl_redop_names[op], dim, (long long)sh->shape[0]);
                int64_t bad = compare_codes(g1, fl_tensor_data(rh), FL_F32, nout, 0, NAN_ANY, &first);
                CHECK(bad == 0, "%s dim %d of [%lld...]: %lld outputs differ from the host run (first %lld: %a vs %a)",
                      fl_redop_names[op], dim, (long long)sh->shape[0], (long long)bad, (long long)first, g1[first],
                      ((float *)fl_tensor_data(rh))[first]);
                free(g1); free(g2); free(codes);
                fl_tensor_release(xh); fl_tensor_release(xg); fl_tensor_release(rh); fl_tensor_release(r1);
                fl_tensor_release(r2);
                twin_free(&host); twin_free(&dev);
            }
}

TEST(gpu_matmul_matches_cpu) {
    if (!gpu_or_skip()) return;
    const fl_device *cpu = fl_cpu_device();
    for (size_t ci = 0; ci < sizeof MM_CASES / sizeof MM_CASES[0]; ci++)
        for (size_t di = 0; di < sizeof MM_DTYPES / sizeof MM_DTYPES[0]; di++) {
            const mm_case *c = &MM_CASES[ci];
            mm_env e;
            REQUIRE_OK(mm_setup(&e, &GPU_RUN, c, MM_DTYPES[di][0], MM_DTYPES[di][1], 40 + ci));
            REQUIRE_OK(fl_cuda_dev_matmul(e.dg, e.ag, e.bg));
            REQUIRE_OK(cpu->matmul(e.dr, e.ar, e.br));
            size_t bytes = (size_t)(c->B * c->M * c->N) * esz(MM_DTYPES[di][1]);
            void *got = malloc(bytes + 1);
            REQUIRE_OK(get_bytes(e.dg, got, bytes));
            int64_t first = 0, bad = mm_compare(&e, c, got, &first);
            CHECK(bad == 0, "case %zu [%lld, %lld, %lld] x [%lld, %lld, %lld]%s%s%s%s %s -> %s: %lld outputs differ (first %lld)",
                  ci, (long long)c->B, (long long)c->M, (long long)c->K, (long long)c->B, (long long)c->K,
                  (long long)c->N, c->a_col ? " a col-major" : "", c->b_col ? " b col-major" : "",
                  c->a_bc ? " a broadcast" : "", c->b_bc ? " b broadcast" : "", dtn(MM_DTYPES[di][0]),
                  dtn(MM_DTYPES[di][1]), (long long)bad, (long long)first);
            free(got);
            mm_free(&e);
        }
    /* K = 0: zeros (core/ops.c fills instead, but the entry must not hand cuBLASLt k = 0) */
    int64_t sa[3] = { 2, 3, 0 }, sb[3] = { 2, 0, 4 }, sd[3] = { 2, 3, 4 };
    fl_tensor *a = NULL, *b = NULL, *d = NULL;
    REQUIRE_OK(fl_tensor_empty(&a, FL_F32, 3, sa, FL_DEV_CUDA));
    REQUIRE_OK(fl_tensor_empty(&b, FL_F32, 3, sb, FL_DEV_CUDA));
    REQUIRE_OK(fl_tensor_full(&d, FL_F32, 3, sd, 7.0, FL_DEV_CUDA));
    REQUIRE_OK(fl_cuda_dev_matmul(d, a, b));
    float out[24];
    REQUIRE_OK(get_bytes(d, out, sizeof out));
    int nz = 0;
    for (int i = 0; i < 24; i++) nz += out[i] != 0.0f;
    CHECK(nz == 0, "K = 0: %d nonzero outputs", nz);
    fl_tensor_release(a); fl_tensor_release(b); fl_tensor_release(d);
}

/* fl_cuda_gemm's strided batch directly: odd batch strides (entries less aligned than the base), a
 * broadcast operand (stride 0), gaps between D entries that must stay untouched, accumulate, and plans
 * cached per stride. Against float64 sums of the same operands. */
TEST(gpu_gemm_strided_batch_matches_reference) {
    const fl_device *dev = gpu_or_skip();
    if (!dev) return;
    typedef struct { int64_t m, n, k, batch; bool at, bt; fl_dtype in, out; int64_t pa, pb, pd; bool bcast_b, acc; } gcase;
    const gcase cases[] = {
        { 7, 5, 3, 6, false, true, FL_F32, FL_F32, 1, 0, 3, true, false },
        { 33, 17, 40, 5, true, false, FL_BF16, FL_BF16, 1, 5, 1, false, false },
        { 64, 48, 32, 3, false, false, FL_F16, FL_F32, 0, 0, 0, false, true },
        { 1, 1, 1, 2, false, true, FL_F32, FL_F32, 0, 0, 1, false, false },
        { 16, 8, 128, 9, true, true, FL_BF16, FL_F32, 8, 0, 16, true, false },
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const gcase *c = &cases[ci];
        int64_t lda = c->at ? c->m + 2 : c->k, ldb = c->bt ? c->n : c->k + 1, ldd = c->n;
        int64_t sa = (c->at ? c->k : c->m) * lda + c->pa, sb = c->bcast_b ? 0 : (c->bt ? c->k : c->n) * ldb + c->pb;
        int64_t sd = c->m * ldd + c->pd;
        int64_t na = sa * c->batch, nb = c->bcast_b ? (c->bt ? c->k : c->n) * ldb : sb * c->batch, nd = sd * c->batch;
        void *ha = malloc((size_t)na * 4), *hb = malloc((size_t)nb * 4), *hd = malloc((size_t)nd * 4), *hr = malloc((size_t)nd * 4);
        gen_normal_codes(ha, c->in, na, 70 + ci);
        gen_normal_codes(hb, c->in, nb, 80 + ci);
        gen_normal_codes(hd, c->out, nd, 90 + ci);
        memcpy(hr, hd, (size_t)nd * esz(c->out));
        twin A, B, D;
        REQUIRE_OK(twin_make(&A, &GPU_RUN, c->in, na, ha));
        REQUIRE_OK(twin_make(&B, &GPU_RUN, c->in, nb, hb));
        REQUIRE_OK(twin_make(&D, &GPU_RUN, c->out, nd, hd));
        fl_cuda_gemm_args g;
        fl_cuda_gemm_args_init(&g, c->m, c->n, c->k);
        g.a = fl_tensor_data(A.got); g.a_dtype = c->in; g.lda = lda; g.a_trans = c->at;
        g.b = fl_tensor_data(B.got); g.b_dtype = c->in; g.ldb = ldb; g.b_trans = c->bt;
        g.d = fl_tensor_data(D.got); g.d_dtype = c->out; g.ldd = ldd;
        g.batch = c->batch; g.stride_a = sa; g.stride_b = sb; g.stride_d = sd; g.accumulate = c->acc;
        REQUIRE_OK(fl_cuda_gemm(&g, NULL));
        size_t calls = fl_cuda_gemm_heuristic_calls();
        if (!c->acc) {   /* the same call again: the cached plan, the same bits */
            REQUIRE_OK(fl_cuda_gemm(&g, NULL));
            CHECK(fl_cuda_gemm_heuristic_calls() == calls, "case %zu: a repeated GEMM ran the heuristic again", ci);
        }
        void *got = malloc((size_t)nd * 4);
        REQUIRE_OK(get_bytes(D.got, got, (size_t)nd * esz(c->out)));
        /* the reference: entries in double, gaps untouched */
        int64_t bad = 0, first = -1;
        for (int64_t z = 0; z < c->batch; z++)
            for (int64_t i = 0; i < c->m; i++)
                for (int64_t j = 0; j < c->n; j++) {
                    double acc = 0, mag = 0;
                    for (int64_t k = 0; k < c->k; k++) {
                        int64_t ia = z * sa + (c->at ? k * lda + i : i * lda + k);
                        int64_t ib = z * sb + (c->bt ? k * ldb + j : j * ldb + k);
                        double p = decode(code_at(ha, c->in, ia), c->in) * decode(code_at(hb, c->in, ib), c->in);
                        acc += p; mag += fabs(p);
                    }
                    int64_t id = z * sd + i * ldd + j;
                    double prior = decode(code_at(hd, c->out, id), c->out);
                    if (c->acc) { acc += prior; mag += fabs(prior); }
                    set_code(hr, c->out, id, encode((float)acc, c->out));
                    double gv = decode(code_at(got, c->out, id), c->out);
                    double tol = (double)(c->k + 1) * 0x1p-23 * mag + 2.0 * ulp_rel(c->out) * fabs(acc);
                    if (!(fabs(gv - acc) <= tol)) { if (first < 0) first = id; bad++; }
                }
        int64_t gaps = 0;
        for (int64_t z = 0; z < c->batch; z++)
            for (int64_t id = z * sd + c->m * ldd; id < (z + 1) * sd; id++) gaps += code_at(got, c->out, id) != code_at(hd, c->out, id);
        CHECK(bad == 0, "case %zu (m %lld n %lld k %lld batch %lld, %s -> %s): %lld outputs differ from float64 (first %lld)",
              ci, (long long)c->m, (long long)c->n, (long long)c->k, (long long)c->batch, dtn(c->in), dtn(c->out),
              (long long)bad, (long long)first);
        CHECK(gaps == 0, "case %zu: %lld elements between D entries were written", ci, (long long)gaps);
        free(ha); free(hb); free(hd); free(hr); free(got);
        twin_free(&A); twin_free(&B); twin_free(&D);
    }
    /* a different batch stride is a different plan */
    size_t before = fl_cuda_gemm_heuristic_calls();
    int64_t n = 2 * 8 * 8 + 8;
    float *z = calloc((size_t)n, 4);
    twin A;
    REQUIRE_OK(twin_make(&A, &GPU_RUN, FL_F32, n, z));
    fl_cuda_gemm_args g;
    fl_cuda_gemm_args_init(&g, 8, 8, 8);
    g.a = g.b = fl_tensor_data(A.got);
    float *d = NULL;
    REQUIRE_OK(dev->alloc(2 * 64 * 4 + 64, (void **)&d));
    g.d = d;
    g.batch = 2; g.stride_a = g.stride_b = 64; g.stride_d = 64;
    REQUIRE_OK(fl_cuda_gemm(&g, NULL));
    g.stride_a = 72;
    REQUIRE_OK(fl_cuda_gemm(&g, NULL));
    CHECK(fl_cuda_gemm_heuristic_calls() >= before + 2, "batch strides are not in the plan key");
    dev->free(d);
    twin_free(&A);
    free(z);
}

#endif
