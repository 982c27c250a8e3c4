/* test_gpu_quantize.c — the CUDA quantize/dequantize/amax kernels against the CPU reference
 * (core/format.c, independent of kernels/): bytes, amax and counters bit-exact, per tensor and per
 * row. Every test is named gpu_* (make test-gpu) and passes with "skipped: no GPU" without a device. */
#include "runner.h"
#include "gpu_test.h"
#include "device.h"
#include "format.h"
#include "rng.h"
#include "tensor.h"
#include <stdint.h>
#include <stdlib.h>
#ifdef FL_HAVE_CUDA
#include "../../kernels/cuda_api.h"
#ifdef FL_HAVE_CUDA
#include "../../kernels/fl_cuda_host.h"
#endif
#endif


/* Random normals at several magnitudes plus the values where casts go wrong: signed zeros, NaN,
 * infinities, fp32 subnormals, FP8 max, the overflow boundary and exact rounding midpoints. */
static void fill_test_data(float *x, size_t n, uint64_t seed) {
    fl_rng r;
    fl_rng_seed(&r, seed);
    fl_rng_normal(&r, x, n, 0.0f, 1.0f);
    static const float mags[] = { 1e-9f, 1e-4f, 0.01f, 1.0f, 30.0f, 500.0f, 7e4f };
    for (size_t i = 0; i < n; i++) x[i] *= mags[(i / 97) % (sizeof mags / sizeof mags[0])];
    const float special[] = { 0.0f, -0.0f, NAN, -NAN, INFINITY, -INFINITY, 1e-40f, -1e-45f, 448.0f, -448.0f,
                              464.0f, 464.0001f, 480.0f, 57344.0f, 61440.0f, -61439.996f, 1e30f, 3.4e38f,
                              0.001953125f * 0.5f, 0.001953125f * 1.5f, 1.0f + 1.0f / 16, 1.0f + 3.0f / 16,
                              from_bits(0x3b000000u), from_bits(0x37800001u) };
    size_t ns = sizeof special / sizeof special[0];
    for (size_t i = 0; i < ns && i * 131 < n; i++) x[i * 131] = special[i];
}

/* A CUDA tensor of dtype dt holding `host` (fp32 values converted to dt on the host). */
static fl_tensor *to_gpu(const fl_device *d, const float *host, int ndim, const int64_t *shape, fl_dtype dt) {
    fl_tensor *t = NULL;
    if (fl_tensor_empty(&t, dt, ndim, shape, FL_DEV_CUDA) != FL_OK) return NULL;
    size_t n = (size_t)fl_tensor_numel(t), es = fl_format(dt)->size;
    void *buf = malloc(n * es + 1);
    if (dt == FL_F32) memcpy(buf, host, n * 4);
    else if (dt == FL_BF16) fl_f32_to_bf16_n(host, buf, n);
    else fl_f32_to_f16_n(host, buf, n);
    fl_status st = d->from_host(fl_tensor_data(t), buf, n * es);
    free(buf);
    if (st != FL_OK) { fl_tensor_release(t); return NULL; }
    return t;
}

/* The source as the GPU sees it, widened to fp32 on the host (bf16/fp16 round-trip). */
static void widen(const float *x, float *out, size_t n, fl_dtype dt) {
    if (dt == FL_F32) { memcpy(out, x, n * 4); return; }
    uint16_t *h = malloc(n * 2);
    if (dt == FL_BF16) { fl_f32_to_bf16_n(x, h, n); fl_bf16_to_f32_n(h, out, n); }
    else { fl_f32_to_f16_n(x, h, n); fl_f16_to_f32_n(h, out, n); }
    free(h);
}

/* An empty FP8 destination on the GPU with room for nscale scale_inv values. */
static fl_tensor *fp8_dst(int ndim, const int64_t *shape, fl_dtype fmt, int64_t nscale, int axis) {
    fl_tensor *q = NULL, *si = NULL;
    if (fl_tensor_empty(&q, fmt, ndim, shape, FL_DEV_CUDA) != FL_OK) return NULL;
    if (fl_tensor_empty(&si, FL_F32, 1, &nscale, FL_DEV_CUDA) != FL_OK) { fl_tensor_release(q); return NULL; }
    q->scale_inv = si;
    q->scale_axis = axis;
    return q;
}

static int count_byte_mismatches(const uint8_t *a, const uint8_t *b, size_t n, size_t *first) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) if (a[i] != b[i]) { if (!bad) *first = i; bad++; }
    return bad;
}

#define CHECK_STATS(g, r)                                                                               \
    do {                                                                                                \
        CHECK(bits_of((g).amax) == bits_of((r).amax), "amax %.9g vs cpu %.9g", (g).amax, (r).amax);     \
        CHECK((g).underflow == (r).underflow, "underflow %lld vs cpu %lld", (long long)(g).underflow,   \
              (long long)(r).underflow);                                                                \
        CHECK((g).saturated == (r).saturated, "saturated %lld vs cpu %lld", (long long)(g).saturated,   \
              (long long)(r).saturated);                                                                \
        CHECK((g).nan == (r).nan, "nan %lld vs cpu %lld", (long long)(g).nan, (long long)(r).nan);      \
    } while (0)

/* The CPU's cast of an [outer, len, inner] source with scales[len], run by run (format.c): bytes into ref, the
 * whole cast's statistics into *total, each index's amax into amax[len]. */
static fl_status cpu_cast_runs(const float *x, uint8_t *ref, size_t outer, size_t len, size_t inner, fl_dtype fmt,
                               const float *scales, fl_overflow p, fl_cast_stats *total, float *amax) {
    fl_cast_stats rs;
    *total = (fl_cast_stats){ 0, 0, 0, 0 };
    for (size_t r = 0; r < len; r++) amax[r] = 0.0f;
    for (size_t o = 0; o < outer; o++)
        for (size_t r = 0; r < len; r++) {
            const size_t at = (o * len + r) * inner;
            fl_status st = fl_quantize_f32(x + at, ref + at, inner, fmt, scales[r], p, &rs);
            if (st != FL_OK) return st;
            if (rs.amax > total->amax) total->amax = rs.amax;
            if (rs.amax > amax[r]) amax[r] = rs.amax;
            total->underflow += rs.underflow; total->saturated += rs.saturated; total->nan += rs.nan;
        }
    return FL_OK;
}

/* Without a GPU the device-side conversion still runs on the host (it is __host__ __device__):
 * check it against format.c over every 2^20 high-bit pattern with random low bits, and the decode
 * over all 256 codes. */
TEST(gpu_cvt_device_code_matches_cpu_on_host) {
#ifndef FL_HAVE_CUDA
    printf("  skipped: built without CUDA\n");
#else
    int bad = 0;
    uint32_t h = 12345;
    for (uint32_t hi = 0; hi < (1u << 20) && bad < 5; hi++) {
        h = h * 1664525u + 1013904223u;
        uint32_t lows[3] = { 0, (h >> 20) & 0xfffu, 0xfffu };   /* include exact ties and just-below-tie */
        for (int k = 0; k < 3; k++) {
            float x = from_bits((hi << 12) | lows[k]);
            for (int p = 0; p < 2; p++) {
                uint8_t g4 = fl_cuda_cvt_fp8_host(x, FL_E4M3, p), c4 = fl_f32_to_e4m3(x, (fl_overflow)p);
                uint8_t g5 = fl_cuda_cvt_fp8_host(x, FL_E5M2, p), c5 = fl_f32_to_e5m2(x, (fl_overflow)p);
                if (g4 != c4 || g5 != c5) {
                    if (bad++ < 5)
                        CHECK(0, "x=%a (0x%08x) policy %d: e4m3 0x%02x vs cpu 0x%02x, e5m2 0x%02x vs cpu 0x%02x",
                              x, bits_of(x), p, g4, c4, g5, c5);
                }
            }
        }
    }
    for (int b = 0; b < 256; b++) {
        CHECK(bits_of(fl_cuda_decode_fp8_host((uint8_t)b, FL_E4M3)) == bits_of(fl_e4m3_to_f32((uint8_t)b)),
              "e4m3 decode of 0x%02x", b);
        CHECK(bits_of(fl_cuda_decode_fp8_host((uint8_t)b, FL_E5M2)) == bits_of(fl_e5m2_to_f32((uint8_t)b)),
              "e5m2 decode of 0x%02x", b);
    }
#endif
}

/* The per-column cast's device code (quantize_cols_kernel: a thread per column, chunks of rows, its geometry for a
 * given SM count) run on the host against format.c run by run: bytes, statistics and per-index amax, for 1, 7 and
 * 132 SMs (grid-strided items, chunks of one and of many rows, a tile of columns cut by the width). */
TEST(gpu_quantize_cols_device_code_matches_cpu_on_host) {
#ifndef FL_HAVE_CUDA
    printf("  skipped: built without CUDA\n");
#else
    struct { size_t outer, len, inner; } cases[] = { { 5000, 40, 1 }, { 700, 300, 1 }, { 2, 37, 129 }, { 50, 3, 1 },
                                                     { 3, 600, 1 }, { 257, 2, 100 } };
    const int sms[] = { 1, 7, 132 };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const size_t outer = cases[c].outer, len = cases[c].len, inner = cases[c].inner, n = outer * len * inner;
        float *x = malloc(n * 4), *scales = malloc(len * 4), *ref_amax = malloc(len * 4), *got_amax = malloc(len * 4);
        uint8_t *ref = malloc(n), *got = malloc(n);
        fill_test_data(x, n, 300 + c);
        for (size_t r = 0; r < len; r++) scales[r] = ldexpf(1.0f, (int)(r % 11) - 5) * (1.0f + 0.02f * (float)(r % 7));
        for (int fi = 0; fi < 2; fi++)
            for (int p = 0; p < 2; p++) {
                const fl_dtype fmt = fi ? FL_E5M2 : FL_E4M3;
                fl_cast_stats total;
                REQUIRE_OK(cpu_cast_runs(x, ref, outer, len, inner, fmt, scales, (fl_overflow)p, &total, ref_amax));
                for (int si = 0; si < 3; si++) {
                    fl_cast_stats gs;
                    memset(got, 0xa5, n);
                    REQUIRE_OK(fl_cuda_quantize_cols_host(x, got, outer, len, inner, fmt, scales, (fl_overflow)p, sms[si],
                                                          &gs, got_amax));
                    size_t first = 0;
                    int bad = count_byte_mismatches(got, ref, n, &first);
                    CHECK(bad == 0, "case %zu %s policy %d sms %d: %d bytes differ, first at %zu", c,
                          fl_format(fmt)->name, p, sms[si], bad, first);
                    CHECK_STATS(gs, total);
                    for (size_t r = 0; r < len; r++)
                        if (bits_of(got_amax[r]) != bits_of(ref_amax[r])) {
                            CHECK(0, "case %zu sms %d: amax[%zu] %g vs %g", c, sms[si], r, got_amax[r], ref_amax[r]);
                            break;
                        }
                    /* the amax pass alone (no bytes written) finds the same amaxes */
                    REQUIRE_OK(fl_cuda_quantize_cols_host(x, NULL, outer, len, inner, fmt, NULL, (fl_overflow)p, sms[si],
                                                          &gs, got_amax));
                    CHECK(bits_of(gs.amax) == bits_of(total.amax), "case %zu amax pass: %g vs %g", c, gs.amax, total.amax);
                    for (size_t r = 0; r < len; r++)
                        if (bits_of(got_amax[r]) != bits_of(ref_amax[r])) {
                            CHECK(0, "case %zu sms %d amax pass: amax[%zu] %g vs %g", c, sms[si], r, got_amax[r],
                                  ref_amax[r]);
                            break;
                        }
                }
            }
        free(x); free(scales); free(ref_amax); free(got_amax); free(ref); free(got);
    }
#endif
}

/* Without a GPU: no device, count 0, synchronize fails with a message, nothing allocated. */
TEST(gpu_absent_device_reports_cleanly) {
    if (fl_device_get(FL_DEV_CUDA)) { printf("  skipped: a GPU is present\n"); return; }
#ifdef FL_HAVE_CUDA
    CHECK(fl_cuda_device_count() == 0, "device count %d", fl_cuda_device_count());
    CHECK(fl_cuda_synchronize() == FL_EDEVICE, "synchronize should fail without a GPU");
    CHECK(strstr(fl_last_error(), "no CUDA GPU") != NULL, "message: %s", fl_last_error());
    CHECK(fl_cuda_memory_allocated() == 0, "allocated %zu", fl_cuda_memory_allocated());
    CHECK(fl_cuda_register() == FL_EDEVICE, "register should keep failing");
#endif
    fl_tensor *t = NULL;
    int64_t n = 4;
    CHECK(fl_tensor_empty(&t, FL_F32, 1, &n, FL_DEV_CUDA) != FL_OK, "a cuda tensor without a GPU");
    fl_tensor_release(t);
}

TEST(gpu_quantize_per_tensor_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    const size_t n = 300007;                      /* odd: exercises the vector tail */
    float *x = malloc(n * 4), *xw = malloc(n * 4);
    uint8_t *ref = malloc(n), *got = malloc(n);
    fill_test_data(x, n, 42);
    const fl_dtype srcs[] = { FL_F32, FL_BF16, FL_F16 }, fmts[] = { FL_E4M3, FL_E5M2 };
    const float scales[] = { 1.0f, 0.37f, 1024.0f };
    for (int si = 0; si < 3; si++)
        for (int off = 0; off < 2; off++)         /* off = 1: a misaligned view takes the scalar path */
            for (int fi = 0; fi < 2; fi++)
                for (int p = 0; p < 2; p++)
                    for (int ki = 0; ki < 3; ki++) {
                        int64_t full = (int64_t)n, len = (int64_t)n - off;
                        fl_tensor *g = to_gpu(d, x, 1, &full, srcs[si]), *v = NULL;
                        REQUIRE(g, "upload: %s", fl_last_error());
                        REQUIRE_OK(fl_tensor_narrow(&v, g, 0, off, len));
                        fl_tensor *q = fp8_dst(1, &len, fmts[fi], 1, -1);
                        REQUIRE(q, "alloc: %s", fl_last_error());
                        REQUIRE_OK(d->quantize(q, v, &scales[ki], -1, (fl_overflow)p));
                        REQUIRE_OK(d->to_host(got, fl_tensor_data(q), (size_t)len));
                        float sinv;
                        REQUIRE_OK(d->to_host(&sinv, fl_tensor_data(q->scale_inv), 4));
                        widen(x + off, xw, (size_t)len, srcs[si]);
                        fl_cast_stats rs;
                        REQUIRE_OK(fl_quantize_f32(xw, ref, (size_t)len, fmts[fi], scales[ki], (fl_overflow)p, &rs));
                        size_t first = 0;
                        int bad = count_byte_mismatches(got, ref, (size_t)len, &first);
                        CHECK(bad == 0, "%s->%s off %d policy %d scale %g: %d bytes differ, first at %zu "
                              "(x=%a gpu 0x%02x cpu 0x%02x)", fl_format(srcs[si])->name, fl_format(fmts[fi])->name,
                              off, p, scales[ki], bad, first, xw[first], got[first], ref[first]);
                        { fl_cast_stats qs; REQUIRE_OK(fl_tensor_qstats(q, &qs)); CHECK_STATS(qs, rs); }
                        CHECK(bits_of(sinv) == bits_of(1.0f / scales[ki]), "scale_inv %g", sinv);
                        fl_tensor_release(q); fl_tensor_release(v); fl_tensor_release(g);
                    }
    free(x); free(xw); free(ref); free(got);
}

/* Per-index scales along an axis: axis 0 of [rows, cols] (per-row), axis 1 of [2, 37, 129] (runs of 129,
 * interleaved: the columns kernel, as are axis 1 of the 2-D tensors: [5000, 40] in chunks of several rows,
 * [700, 300] in two tiles of columns) and axis 1 of [2, 5, 300] (runs of 300: the rows kernel with outer > 1).
 * Reference: format.c run by run with that run's scale. */
TEST(gpu_quantize_per_row_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    struct { int ndim; int64_t shape[3]; int axis; } cases[] = {
        { 2, { 333, 1024 }, 0 }, { 2, { 64, 1001 }, 0 }, { 3, { 2, 37, 129 }, 1 }, { 2, { 50, 3 }, 1 },
        { 2, { 5000, 40 }, 1 }, { 2, { 700, 300 }, 1 }, { 3, { 2, 5, 300 }, 1 } };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int ndim = cases[c].ndim, axis = cases[c].axis;
        const int64_t *shape = cases[c].shape;
        size_t outer = 1, len = (size_t)shape[axis], inner = 1, n;
        for (int i = 0; i < axis; i++) outer *= (size_t)shape[i];
        for (int i = axis + 1; i < ndim; i++) inner *= (size_t)shape[i];
        n = outer * len * inner;
        float *x = malloc(n * 4), *xw = malloc(n * 4), *scales = malloc(len * 4), *row_ref = calloc(len, 4),
              *row_got = malloc(len * 4), *sinv = malloc(len * 4);
        uint8_t *ref = malloc(n), *got = malloc(n);
        fill_test_data(x, n, 7 + c);
        for (size_t r = 0; r < len; r++) scales[r] = ldexpf(1.0f, (int)(r % 13) - 6) * (1.0f + 0.01f * (float)r);
        for (int si = 0; si < 3; si++)
            for (int fi = 0; fi < 2; fi++)
                for (int p = 0; p < 2; p++) {
                    fl_dtype src_dt = si == 0 ? FL_F32 : si == 1 ? FL_BF16 : FL_F16, fmt = fi ? FL_E5M2 : FL_E4M3;
                    fl_tensor *g = to_gpu(d, x, ndim, shape, src_dt);
                    fl_tensor *q = fp8_dst(ndim, shape, fmt, (int64_t)len, axis);
                    REQUIRE(g && q, "alloc: %s", fl_last_error());
                    REQUIRE_OK(d->quantize(q, g, scales, axis, (fl_overflow)p));
                    REQUIRE_OK(d->to_host(got, fl_tensor_data(q), n));
                    REQUIRE_OK(d->to_host(sinv, fl_tensor_data(q->scale_inv), len * 4));
                    REQUIRE_OK(d->amax(g, axis, row_got));
                    widen(x, xw, n, src_dt);
                    fl_cast_stats total;
                    REQUIRE_OK(cpu_cast_runs(xw, ref, outer, len, inner, fmt, scales, (fl_overflow)p, &total, row_ref));
                    size_t first = 0;
                    int bad = count_byte_mismatches(got, ref, n, &first);
                    CHECK(bad == 0, "case %zu %s->%s policy %d: %d bytes differ, first at %zu", c,
                          fl_format(src_dt)->name, fl_format(fmt)->name, p, bad, first);
                    { fl_cast_stats qs; REQUIRE_OK(fl_tensor_qstats(q, &qs)); CHECK_STATS(qs, total); }
                    for (size_t r = 0; r < len; r++) {
                        CHECK(bits_of(row_got[r]) == bits_of(row_ref[r]), "case %zu amax[%zu] %g vs %g", c, r,
                              row_got[r], row_ref[r]);
                        CHECK(bits_of(sinv[r]) == bits_of(1.0f / scales[r]), "scale_inv[%zu]", r);
                    }
                    fl_tensor_release(q); fl_tensor_release(g);
                }
        free(x); free(xw); free(scales); free(row_ref); free(row_got); free(sinv); free(ref); free(got);
    }
}

/* Current scaling on the device (quantize_current): the scales come from the GPU's own amax pass, with
 * no host round trip. Against the CPU entry on the same values: bytes, scale_inv bits, statistics; the
 * statistics stay pending (qfuture) until read. */
TEST(gpu_quantize_current_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    const fl_device *cpu = fl_cpu_device();
    struct { int ndim; int64_t shape[3]; int axis; } cases[] = {
        { 2, { 333, 1024 }, -1 }, { 2, { 333, 1024 }, 0 }, { 2, { 64, 1001 }, 1 }, { 3, { 2, 37, 129 }, 1 },
        { 2, { 0, 16 }, -1 }, { 2, { 0, 16 }, 1 }, { 1, { 7 }, -1 }, { 2, { 5000, 40 }, 1 }, { 3, { 2, 5, 300 }, 1 } };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int ndim = cases[c].ndim, axis = cases[c].axis;
        const int64_t *shape = cases[c].shape;
        size_t n = 1, ns = axis < 0 ? 1 : (size_t)shape[axis];
        for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
        float *x = malloc(n * 4 + 4), *sg = malloc(ns * 4 + 4), *sr = malloc(ns * 4 + 4);
        uint8_t *got = malloc(n + 1);
        fill_test_data(x, n, 99 + c);
        if (c == 6) for (size_t i = 0; i < n; i++) x[i] = 0.0f;   /* all zeros: the amax floor */
        for (int si = 0; si < 2; si++)
            for (int fi = 0; fi < 2; fi++)
                for (int v = 0; v < 3; v++) {
                    fl_dtype src_dt = si ? FL_BF16 : FL_F32, fmt = fi ? FL_E5M2 : FL_E4M3;
                    bool pow2 = v >= 1;
                    int margin = v == 2 ? 3 : 0;
                    fl_tensor *g = to_gpu(d, x, ndim, shape, src_dt), *h = NULL;
                    fl_tensor *q = fp8_dst(ndim, shape, fmt, (int64_t)ns, axis);
                    fl_tensor *qr = NULL, *sir = NULL;
                    REQUIRE(g && q, "alloc: %s", fl_last_error());
                    REQUIRE_OK(fl_tensor_from_f32(&h, x, ndim, shape, src_dt));
                    REQUIRE_OK(fl_tensor_empty(&qr, fmt, ndim, shape, FL_DEV_CPU));
                    int64_t ns64 = (int64_t)ns;
                    REQUIRE_OK(fl_tensor_empty(&sir, FL_F32, 1, &ns64, FL_DEV_CPU));
                    fl_tensor_release(qr->scale_inv);
                    qr->scale_inv = sir;
                    qr->scale_axis = axis;
                    REQUIRE_OK(d->quantize_current(q, g, axis, margin, pow2, FL_SATURATE));
                    CHECK(n == 0 || q->qfuture, "case %zu: the statistics were read back at once", c);
                    REQUIRE_OK(cpu->quantize_current(qr, h, axis, margin, pow2, FL_SATURATE));
                    REQUIRE_OK(d->to_host(got, fl_tensor_data(q), n));
                    REQUIRE_OK(d->to_host(sg, fl_tensor_data(q->scale_inv), ns * 4));
                    memcpy(sr, fl_tensor_data(qr->scale_inv), ns * 4);
                    size_t first = 0;
                    int bad = count_byte_mismatches(got, fl_tensor_data(qr), n, &first);
                    const char *what = fl_format(src_dt)->name;
                    CHECK(bad == 0, "case %zu %s->%s pow2 %d margin %d: %d bytes differ, first at %zu", c, what,
                          fl_format(fmt)->name, pow2, margin, bad, first);
                    for (size_t r = 0; r < ns; r++)
                        if (bits_of(sg[r]) != bits_of(sr[r])) {
                            CHECK(0, "case %zu %s pow2 %d: scale_inv[%zu] %a vs %a", c, what, pow2, r, sg[r], sr[r]);
                            break;
                        }
                    fl_cast_stats qs;
                    REQUIRE_OK(fl_tensor_qstats(q, &qs));
                    CHECK_STATS(qs, qr->qstats);
                    fl_tensor_release(q); fl_tensor_release(g); fl_tensor_release(qr); fl_tensor_release(h);
                }
        free(x); free(sg); free(sr); free(got);
    }
}

/* quantize_transpose: the cast and its transposed copy in one pass (fused cast_transpose), host scale or
 * current scaling; bytes against the CPU's cast, the copy against their transpose, scale_inv and stats. */
TEST(gpu_quantize_transpose_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    const fl_device *cpu = fl_cpu_device();
    const int64_t shapes[][2] = { { 64, 128 }, { 33, 17 }, { 1, 48 }, { 130, 64 }, { 0, 16 } };
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const int64_t R = shapes[c][0], C = shapes[c][1], ts[2] = { C, R };
        size_t n = (size_t)(R * C);
        float *x = malloc(n * 4 + 4);
        uint8_t *got = malloc(n + 1), *got_t = malloc(n + 1);
        fill_test_data(x, n, 500 + c);
        for (int si = 0; si < 2; si++)
            for (int fi = 0; fi < 2; fi++)
                for (int v = 0; v < 3; v++) {   /* 0: host scale; 1: current; 2: current pow2 margin 2 */
                    fl_dtype src_dt = si ? FL_BF16 : FL_F32, fmt = fi ? FL_E5M2 : FL_E4M3;
                    const float scale = 0.37f;
                    fl_tensor *g = to_gpu(d, x, 2, shapes[c], src_dt), *q = fp8_dst(2, shapes[c], fmt, 1, -1);
                    fl_tensor *qt = NULL, *h = NULL, *qr = NULL;
                    REQUIRE(g && q, "alloc: %s", fl_last_error());
                    REQUIRE_OK(fl_tensor_empty(&qt, fmt, 2, ts, FL_DEV_CUDA));
                    fl_tensor_release(qt->scale_inv);
                    qt->scale_inv = fl_tensor_retain(q->scale_inv);
                    REQUIRE_OK(fl_tensor_from_f32(&h, x, 2, shapes[c], src_dt));
                    REQUIRE_OK(fl_tensor_empty(&qr, fmt, 2, shapes[c], FL_DEV_CPU));
                    REQUIRE_OK(d->quantize_transpose(q, qt, g, v == 0 ? &scale : NULL, v == 2 ? 2 : 0, v == 2,
                                                     FL_SATURATE));
                    REQUIRE_OK(v == 0 ? cpu->quantize(qr, h, &scale, -1, FL_SATURATE)
                                      : cpu->quantize_current(qr, h, -1, v == 2 ? 2 : 0, v == 2, FL_SATURATE));
                    REQUIRE_OK(d->to_host(got, fl_tensor_data(q), n));
                    REQUIRE_OK(d->to_host(got_t, fl_tensor_data(qt), n));
                    const uint8_t *ref = fl_tensor_data(qr);
                    size_t first = 0;
                    int bad = count_byte_mismatches(got, ref, n, &first), bad_t = 0;
                    for (int64_t i = 0; i < R; i++)
                        for (int64_t j = 0; j < C; j++) bad_t += got_t[j * R + i] != ref[i * C + j];
                    CHECK(bad == 0 && bad_t == 0, "[%lld, %lld] %s->%s variant %d: %d bytes and %d transposed bytes "
                          "differ", (long long)R, (long long)C, fl_format(src_dt)->name, fl_format(fmt)->name, v, bad,
                          bad_t);
                    float sinv;
                    REQUIRE_OK(d->to_host(&sinv, fl_tensor_data(q->scale_inv), 4));
                    CHECK(bits_of(sinv) == bits_of(((const float *)fl_tensor_data(qr->scale_inv))[0]), "scale_inv %a", sinv);
                    fl_cast_stats st, stt;
                    REQUIRE_OK(fl_tensor_qstats(q, &st));
                    REQUIRE_OK(fl_tensor_qstats(qt, &stt));
                    CHECK_STATS(st, qr->qstats);
                    CHECK_STATS(stt, qr->qstats);
                    fl_tensor_release(q); fl_tensor_release(qt); fl_tensor_release(g); fl_tensor_release(h);
                    fl_tensor_release(qr);
                }
        free(x); free(got); free(got_t);
    }
}

/* More casts alive at once than the statistics arena has slots: the overflow reads back synchronously,
 * every tensor still reports its own statistics, and the slots come back when the tensors go. */
TEST(gpu_quantize_pending_stats_outlive_the_arena) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    enum { CASTS = 20000 };
    fl_tensor **qs = calloc(CASTS, sizeof *qs);
    int64_t n = 4;
    int pending = 0;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < CASTS; i++) {
            float v[4] = { (float)(i + 1), -0.5f, 0.0f, 1e-30f };
            fl_tensor *g = to_gpu(d, v, 1, &n, FL_F32);
            qs[i] = fp8_dst(1, &n, FL_E4M3, 1, -1);
            float scale = 1.0f;
            REQUIRE(g && qs[i], "alloc %d: %s", i, fl_last_error());
            REQUIRE_OK(d->quantize(qs[i], g, &scale, -1, FL_SATURATE));
            if (round == 0 && qs[i]->qfuture) pending++;
            fl_tensor_release(g);
        }
        int bad = 0;
        for (int i = CASTS - 1; i >= 0; i--) {
            fl_cast_stats st, want;
            float v[4] = { (float)(i + 1), -0.5f, 0.0f, 1e-30f };
            uint8_t q[4];
            REQUIRE_OK(fl_quantize_f32(v, q, 4, FL_E4M3, 1.0f, FL_SATURATE, &want));   /* 449..464 round to 448 */
            REQUIRE_OK(fl_tensor_qstats(qs[i], &st));
            if (st.amax != want.amax || st.underflow != want.underflow || st.saturated != want.saturated) bad++;
            fl_tensor_release(qs[i]);
        }
        CHECK(bad == 0, "round %d: %d casts report another cast's statistics", round, bad);
    }
    CHECK(pending > 0 && pending < CASTS, "%d of %d casts were left pending (expected some, not all)", pending, CASTS);
    free(qs);
}

TEST(gpu_amax_per_tensor_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    size_t n = 1 << 20;
    float *x = malloc(n * 4);
    fill_test_data(x, n, 99);
    int64_t shape = (int64_t)n;
    fl_tensor *g = to_gpu(d, x, 1, &shape, FL_F32);
    REQUIRE(g, "upload: %s", fl_last_error());
    float got = -1;
    REQUIRE_OK(d->amax(g, -1, &got));
    float ref = fl_amax_f32(x, n);
    CHECK(bits_of(got) == bits_of(ref), "amax %g vs cpu %g", got, ref);
    /* all-NaN and all-zero sources give 0 */
    for (size_t i = 0; i < 1000; i++) x[i] = i % 2 ? NAN : -0.0f;
    fl_tensor *h = to_gpu(d, x, 1, &(int64_t){ 1000 }, FL_F32);
    REQUIRE(h, "upload: %s", fl_last_error());
    REQUIRE_OK(d->amax(h, -1, &got));
    CHECK(got == 0.0f, "amax of NaN/zero %g", got);
    fl_tensor_release(g); fl_tensor_release(h);
    free(x);
}

/* Dequantize every code, per tensor and per row, into fp32/bf16/fp16; reference: format.c's decode
 * times scale_inv, then the CPU's own fp32 -> bf16/fp16 conversions. */
TEST(gpu_dequantize_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    int64_t shape[2] = { 8, 256 };
    size_t n = 8 * 256;
    uint8_t codes[8 * 256];
    for (size_t i = 0; i < n; i++) codes[i] = (uint8_t)(i & 255);
    float sinv[8] = { 1.0f, 0.5f, 3.0f, 1e-3f, 1e30f, 7.25f, 1.0f / 448, 65504.0f };
    for (int fi = 0; fi < 2; fi++)
        for (int axis = -1; axis <= 0; axis++)
            for (int di = 0; di < 3; di++) {
                fl_dtype fmt = fi ? FL_E5M2 : FL_E4M3, dt = di == 0 ? FL_F32 : di == 1 ? FL_BF16 : FL_F16;
                fl_tensor *q = fp8_dst(2, shape, fmt, axis < 0 ? 1 : 8, axis), *y = NULL;
                REQUIRE(q, "alloc: %s", fl_last_error());
                REQUIRE_OK(fl_tensor_empty(&y, dt, 2, shape, FL_DEV_CUDA));
                REQUIRE_OK(d->from_host(fl_tensor_data(q), codes, n));
                REQUIRE_OK(d->from_host(fl_tensor_data(q->scale_inv), sinv, axis < 0 ? 4 : 32));
                REQUIRE_OK(d->dequantize(y, q));
                float ref[8 * 256];
                for (size_t r = 0; r < 8; r++)
                    fl_dequantize_f32(codes + r * 256, ref + r * 256, 256, fmt, sinv[axis < 0 ? 0 : r]);
                int bad = 0;
                if (dt == FL_F32) {
                    float got[8 * 256];
                    REQUIRE_OK(d->to_host(got, fl_tensor_data(y), n * 4));
                    for (size_t i = 0; i < n; i++) bad += bits_of(got[i]) != bits_of(ref[i]);
                } else {
                    uint16_t got[8 * 256], want[8 * 256];
                    REQUIRE_OK(d->to_host(got, fl_tensor_data(y), n * 2));
                    if (dt == FL_BF16) fl_f32_to_bf16_n(ref, want, n); else fl_f32_to_f16_n(ref, want, n);
                    for (size_t i = 0; i < n; i++) bad += got[i] != want[i];
                }
                CHECK(bad == 0, "%s -> %s axis %d: %d values differ", fl_format(fmt)->name, fl_format(dt)->name,
                      axis, bad);
                fl_tensor_release(q); fl_tensor_release(y);
            }
}

/* The caching allocator hands a freed block back for the next request of the same size class and
 * keeps memory_allocated / max_memory_allocated in step. */
TEST(gpu_allocator_reuses_blocks_and_counts_bytes) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
#ifdef FL_HAVE_CUDA
    size_t base = fl_cuda_memory_allocated();
    void *a = NULL, *b = NULL, *c = NULL;
    REQUIRE_OK(d->alloc(3000, &a));
    CHECK(fl_cuda_memory_allocated() == base + 4096, "allocated %zu (base %zu)", fl_cuda_memory_allocated(), base);
    d->free(a);
    CHECK(fl_cuda_memory_allocated() == base, "after free %zu", fl_cuda_memory_allocated());
    REQUIRE_OK(d->alloc(4000, &b));
    CHECK(a == b, "same size class should reuse the block");
    REQUIRE_OK(d->alloc((size_t)5 << 20, &c));
    CHECK(fl_cuda_max_memory_allocated() >= base + 4096 + ((size_t)6 << 20), "peak %zu",
          fl_cuda_max_memory_allocated());
    d->free(b); d->free(c);
    CHECK(fl_cuda_memory_allocated() == base, "after frees %zu", fl_cuda_memory_allocated());
    CHECK_OK(fl_cuda_synchronize());
#endif
}
