/* test_gpu_fp8.c — the CUDA FP8 kernels (kernels/fl_cuda_ops.h) against the CPU reference:
 * cast+transpose+amax bit-exact with core/format.c, FP8 and high-precision cuBLASLt GEMMs against
 * float64 sums of the decoded operands, AdamW and MS-AMP's Adam bit-exact with core/optim.c.
 * Every test is named gpu_* (make test-gpu). Those that need a device pass with "skipped: no GPU"
 * without one; the *_on_host tests run the kernels' own __host__ __device__ code on the host, and the
 * argument checks run before any CUDA call, so both run everywhere CUDA is built in. */
#include "runner.h"
#include "gpu_test.h"
#include "device.h"
#include "format.h"
#include "optim.h"
#include "scaling.h"
#include "rng.h"
#include "tensor.h"
#include <float.h>
#include <stdint.h>
#include <stdlib.h>

#ifndef FL_HAVE_CUDA

TEST(gpu_fp8_kernels_not_built) { printf("  skipped: built without CUDA\n"); }

#else

#include "../../kernels/cuda_api.h"
#include "../../kernels/fl_cuda_ops.h"

/* ---- helpers ------------------------------------------------------------------------------------- */



/* Random normals at several magnitudes plus the values where casts go wrong (as in test_gpu_quantize.c). */
static void fill_test_data(float *x, size_t n, uint64_t seed, bool specials) {
    fl_rng r;
    fl_rng_seed(&r, seed);
    fl_rng_normal(&r, x, n, 0.0f, 1.0f);
    static const float mags[] = { 1e-9f, 1e-4f, 0.01f, 1.0f, 30.0f, 500.0f, 7e4f };
    for (size_t i = 0; i < n; i++) x[i] *= mags[(i / 97) % (sizeof mags / sizeof mags[0])];
    if (!specials) return;
    const float special[] = { 0.0f, -0.0f, NAN, -NAN, INFINITY, -INFINITY, 1e-40f, -1e-45f, 448.0f, -448.0f,
                              464.0f, 464.0001f, 480.0f, 57344.0f, 61440.0f, -61439.996f, 1e30f, 3.4e38f,
                              0.001953125f * 0.5f, 0.001953125f * 1.5f, 1.0f + 1.0f / 16, 1.0f + 3.0f / 16,
                              from_bits(0x3b000000u), from_bits(0x37800001u) };
    size_t ns = sizeof special / sizeof special[0];
    for (size_t i = 0; i < ns && i * 131 < n; i++) x[i * 131] = special[i];
}

/* x as the GPU sees it in dtype dt: bytes to upload (buf) and the values widened back (xw). */
static size_t as_dtype(const float *x, size_t n, fl_dtype dt, void *buf, float *xw) {
    if (dt == FL_F32) { memcpy(buf, x, n * 4); if (xw != x) memcpy(xw, x, n * 4); return 4; }
    if (dt == FL_BF16) { fl_f32_to_bf16_n(x, buf, n); fl_bf16_to_f32_n(buf, xw, n); }
    else { fl_f32_to_f16_n(x, buf, n); fl_f16_to_f32_n(buf, xw, n); }
    return 2;
}

static int count_mismatches(const uint8_t *a, const uint8_t *b, size_t n, size_t *first) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) if (a[i] != b[i]) { if (!bad) *first = i; bad++; }
    return bad;
}

static fl_cast_stats stats_of(const fl_cuda_qstats *q) {
    fl_cast_stats s = { from_bits(q->amax_bits), (int64_t)q->underflow, (int64_t)q->saturated, (int64_t)q->nan };
    return s;
}

#define CHECK_STATS(g, r, what)                                                                           \
    do {                                                                                                  \
        CHECK(bits_of((g).amax) == bits_of((r).amax), "%s: amax %.9g vs cpu %.9g", what, (g).amax, (r).amax); \
        CHECK((g).underflow == (r).underflow && (g).saturated == (r).saturated && (g).nan == (r).nan,      \
              "%s: counters (underflow, saturated, nan) (%lld, %lld, %lld) vs cpu (%lld, %lld, %lld)", what, \
              (long long)(g).underflow, (long long)(g).saturated, (long long)(g).nan,                     \
              (long long)(r).underflow, (long long)(r).saturated, (long long)(r).nan);                    \
    } while (0)

/* ---- the kernels' own code on the host (no GPU needed) ------------------------------------------- */

/* fp32 -> fp16 of the optimizer kernels (MS-AMP's v and fp16 master weights) against format.c. */
TEST(gpu_f16_rounding_device_code_matches_cpu_on_host) {
    int bad = 0;
    for (uint32_t hi = 0; hi < (1u << 20); hi++) {
        uint32_t lows[3] = { 0, 0x800u, (hi * 2654435761u) & 0xfffu };
        for (int k = 0; k < 3; k++) {
            float x = from_bits((hi << 12) | lows[k]);
            uint16_t g = fl_cuda_f32_to_f16_host(x), c = fl_f32_to_f16(x);
            if (g != c && bad++ < 5) CHECK(0, "x=%a: 0x%04x vs cpu 0x%04x", x, g, c);
        }
    }
    CHECK(bad == 0, "%d fp16 mismatches", bad);
}

/* ---- optimizer state shared by the host-run and GPU tests ---------------------------------------- */

typedef struct { fl_dtype p, g, m, v; bool o3; } msamp_cfg;
static const msamp_cfg MSAMP_CFGS[] = {
    { FL_F32, FL_F32, FL_F32, FL_F32, false },     /* O1 moments with an fp32 gradient */
    { FL_F32, FL_E4M3, FL_E4M3, FL_F16, false },   /* O2 */
    { FL_F32, FL_F32, FL_E4M3, FL_F16, false },
    { FL_F16, FL_E5M2, FL_E4M3, FL_F16, true },    /* O3: fp16 master, FP8 weight */
    { FL_F16, FL_E4M3, FL_F32, FL_F32, true },
};

typedef struct {
    msamp_cfg c;
    size_t n;
    void *p, *g, *m, *v;
    uint8_t *pf;
    float gsi, msi, vsi, pfsi;
} msamp_state;

static size_t esz(fl_dtype t) { return fl_format(t)->size; }

static void msamp_init(msamp_state *s, msamp_cfg c, size_t n, uint64_t seed) {
    s->c = c; s->n = n;
    float *x = malloc(n * 4);
    fl_rng r;
    fl_rng_seed(&r, seed);
    s->p = malloc(n * 4); s->g = malloc(n * 4); s->m = malloc(n * 4); s->v = malloc(n * 4); s->pf = malloc(n);
    fl_rng_normal(&r, x, n, 0.0f, 0.05f);
    if (c.p == FL_F32) memcpy(s->p, x, n * 4); else fl_f32_to_f16_n(x, s->p, n);
    fl_rng_normal(&r, x, n, 0.0f, 1e-3f);
    s->gsi = 1.0f;
    if (c.g == FL_F32) memcpy(s->g, x, n * 4);
    else { s->gsi = 1.0f / 65536.0f; fl_quantize_f32(x, s->g, n, c.g, 65536.0f, FL_SATURATE, NULL); }
    fl_rng_normal(&r, x, n, 0.0f, 1e-4f);
    s->msi = 1.0f;
    if (c.m == FL_F32) memcpy(s->m, x, n * 4);
    else { s->msi = 1.0f / 1048576.0f; fl_quantize_f32(x, s->m, n, FL_E4M3, 1048576.0f, FL_SATURATE, NULL); }
    for (size_t i = 0; i < n; i++) x[i] = x[i] * x[i] * 0.5f;
    s->vsi = 1.0f;
    if (c.v == FL_F32) memcpy(s->v, x, n * 4);
    else {
        s->vsi = ldexpf(1.0f, -30);
        for (size_t i = 0; i < n; i++) x[i] *= ldexpf(1.0f, 30);
        fl_f32_to_f16_n(x, s->v, n);
    }
    memset(s->pf, 0, n);
    s->pfsi = 1.0f;
    free(x);
}

static void msamp_free(msamp_state *s) { free(s->p); free(s->g); free(s->m); free(s->v); free(s->pf); }

static void msamp_copy(msamp_state *dst, const msamp_state *src) {
    msamp_init(dst, src->c, src->n, 0);
    memcpy(dst->p, src->p, src->n * 4); memcpy(dst->g, src->g, src->n * 4); memcpy(dst->m, src->m, src->n * 4);
    memcpy(dst->v, src->v, src->n * 4); memcpy(dst->pf, src->pf, src->n);
    dst->gsi = src->gsi; dst->msi = src->msi; dst->vsi = src->vsi; dst->pfsi = src->pfsi;
}

static fl_tensor *cpu_tensor(fl_dtype dt, size_t n, const void *data, float si) {
    fl_tensor *t = NULL;
    int64_t shape = (int64_t)n;
    if (fl_tensor_empty(&t, dt, 1, &shape, FL_DEV_CPU) != FL_OK) return NULL;
    memcpy(fl_tensor_data(t), data, n * esz(dt));
    if (t->scale_inv) *(float *)fl_tensor_data(t->scale_inv) = si;
    return t;
}

static fl_cuda_msamp_args msamp_args(msamp_state *s, double lr, int64_t step) {
    fl_cuda_msamp_args a = { s->p, s->c.p, s->g, s->c.g, &s->gsi, s->m, s->c.m, &s->msi, s->v, s->c.v, &s->vsi,
                             s->c.o3 ? s->pf : NULL, &s->pfsi, s->n, lr, 0.9, 0.999, 1e-8, 0.01, step };
    return a;
}

/* core/optim.c's step on CPU tensors made from the state, copied back into it. */
static fl_status msamp_cpu_step(msamp_state *s, double lr, int64_t step) {
    fl_tensor *p = cpu_tensor(s->c.p, s->n, s->p, 1.0f), *g = cpu_tensor(s->c.g, s->n, s->g, s->gsi),
              *m = cpu_tensor(s->c.m, s->n, s->m, s->msi), *v = cpu_tensor(s->c.v, s->n, s->v, 1.0f),
              *vsi = cpu_tensor(FL_F32, 1, &s->vsi, 1.0f), *pf = s->c.o3 ? cpu_tensor(FL_E4M3, s->n, s->pf, s->pfsi) : NULL;
    fl_status st = fl_msamp_adamw_step(p, g, m, v, vsi, pf, lr, 0.9, 0.999, 1e-8, 0.01, step);
    if (st == FL_OK) {
        memcpy(s->p, fl_tensor_data(p), s->n * esz(s->c.p));
        memcpy(s->m, fl_tensor_data(m), s->n * esz(s->c.m));
        memcpy(s->v, fl_tensor_data(v), s->n * esz(s->c.v));
        if (m->scale_inv) s->msi = *(float *)fl_tensor_data(m->scale_inv);
        s->vsi = *(float *)fl_tensor_data(vsi);
        if (pf) { memcpy(s->pf, fl_tensor_data(pf), s->n); s->pfsi = *(float *)fl_tensor_data(pf->scale_inv); }
    }
    fl_tensor_release(p); fl_tensor_release(g); fl_tensor_release(m); fl_tensor_release(v);
    fl_tensor_release(vsi); fl_tensor_release(pf);
    return st;
}

static void msamp_compare(int *fl__failed, const msamp_state *a, const msamp_state *b, const char *who, int ci, int step) {
    size_t f = 0;
    int bp = count_mismatches(a->p, b->p, a->n * esz(a->c.p), &f);
    int bm = count_mismatches(a->m, b->m, a->n * esz(a->c.m), &f);
    int bv = count_mismatches(a->v, b->v, a->n * esz(a->c.v), &f);
    int bf = a->c.o3 ? count_mismatches(a->pf, b->pf, a->n, &f) : 0;
    CHECK(bp + bm + bv + bf == 0, "%s cfg %d step %d: bytes differ in p %d, m %d, v %d, p_fp8 %d", who, ci, step, bp,
          bm, bv, bf);
    CHECK(bits_of(a->msi) == bits_of(b->msi) && bits_of(a->vsi) == bits_of(b->vsi) &&
          bits_of(a->pfsi) == bits_of(b->pfsi), "%s cfg %d step %d: scale_inv m %a/%a v %a/%a p_fp8 %a/%a", who, ci,
          step, a->msi, b->msi, a->vsi, b->vsi, a->pfsi, b->pfsi);
}

TEST(gpu_adamw_device_code_matches_cpu_on_host) {
    /* without and with amsgrad (array 4: the running maximum of v, half of it above the first step's v) */
    const size_t n = 10007;
    for (int ams = 0; ams < 2; ams++) {
        float *st[2][5];
        fl_rng r;
        fl_rng_seed(&r, 3);
        for (int k = 0; k < 5; k++) {
            st[0][k] = malloc(n * 4); st[1][k] = malloc(n * 4);
            fl_rng_normal(&r, st[0][k], n, 0.0f, k >= 3 ? 1e-3f : 0.1f);
            if (k >= 3) for (size_t i = 0; i < n; i++) st[0][k][i] *= st[0][k][i];
            /* amsgrad's NaN rule (the maximum is NaN if either is): a NaN vmax stays, a NaN g makes v and vmax NaN */
            if (ams && k == 4) st[0][k][5] = NAN;
            if (ams && k == 1) st[0][k][9] = NAN;
            memcpy(st[1][k], st[0][k], n * 4);
        }
        float *vm0 = ams ? st[0][4] : NULL, *vm1 = ams ? st[1][4] : NULL;
        for (int step = 1; step <= 3; step++) {
            fl_adamw_kernel_f32(st[0][0], st[0][1], st[0][2], st[0][3], vm0, (int64_t)n, 1e-3, 0.9, 0.999, 1e-8, 0.01,
                                step);
            REQUIRE_OK(fl_cuda_adamw_host(st[1][0], st[1][1], st[1][2], st[1][3], vm1, n, 1e-3, 0.9, 0.999, 1e-8, 0.01,
                                          step));
            for (int k = 0; k < 5; k++) {   /* bit for bit, NaN equal to NaN */
                int bad = 0;
                for (size_t i = 0; i < n; i++) bad += !same_float(st[0][k][i], st[1][k][i]);
                CHECK(bad == 0, "amsgrad %d step %d array %d: %d elements differ", ams, step, k, bad);
            }
        }
        for (int k = 0; k < 5; k++) { free(st[0][k]); free(st[1][k]); }
    }
}

TEST(gpu_msamp_adam_device_code_matches_cpu_on_host) {
    for (size_t ci = 0; ci < sizeof MSAMP_CFGS / sizeof MSAMP_CFGS[0]; ci++) {
        msamp_state cpu, emu;
        msamp_init(&cpu, MSAMP_CFGS[ci], 70001, 17 + ci);
        msamp_copy(&emu, &cpu);
        for (int step = 1; step <= 2; step++) {
            REQUIRE_OK(msamp_cpu_step(&cpu, 1e-3, step));
            fl_cuda_msamp_args a = msamp_args(&emu, 1e-3, step);
            REQUIRE_OK(fl_cuda_msamp_adamw_host(&a));
            msamp_compare(fl__failed, &emu, &cpu, "host run", (int)ci, step);
        }
        msamp_free(&cpu); msamp_free(&emu);
    }
}

/* Argument checks come before any CUDA call: the same errors with or without a GPU. The pointers are
 * never dereferenced. */
TEST(gpu_fp8_launchers_reject_bad_arguments) {
    void *fake = (void *)(uintptr_t)0x10000;
    float *ff = (float *)fake;
    fl_cuda_gemm_args g;
    fl_cuda_gemm_args_init(&g, 64, 64, 64);
    g.a = g.b = g.d = fake; g.a_dtype = g.b_dtype = FL_E4M3; g.d_dtype = FL_BF16;
    g.a_scale_inv = g.b_scale_inv = ff;
    g.k = g.lda = g.ldb = 40;
    CHECK(fl_cuda_gemm(&g, NULL) == FL_EUNSUPPORTED && strstr(fl_last_error(), "multiples of 16"), "%s", fl_last_error());
    g.k = g.lda = g.ldb = 64;
    g.a_dtype = g.b_dtype = FL_E5M2;
    CHECK(fl_cuda_gemm(&g, NULL) == FL_EUNSUPPORTED && strstr(fl_last_error(), "e5m2 x e5m2"), "%s", fl_last_error());
    g.a_dtype = FL_E4M3; g.b_trans = true;
    CHECK(fl_cuda_gemm(&g, NULL) == FL_EUNSUPPORTED && strstr(fl_last_error(), "TN"), "%s", fl_last_error());
    g.b_trans = false; g.a_scale_inv = NULL;
    CHECK(fl_cuda_gemm(&g, NULL) == FL_EINVAL && strstr(fl_last_error(), "scale_inv"), "%s", fl_last_error());
    g.a_scale_inv = ff; g.d_dtype = FL_E4M3; g.accumulate = true;
    CHECK(fl_cuda_gemm(&g, NULL) == FL_EINVAL && strstr(fl_last_error(), "cannot accumulate"), "%s", fl_last_error());
    g.accumulate = false; g.d_dtype = FL_BF16; g.a = (uint8_t *)fake + 8;
    CHECK(fl_cuda_gemm(&g, NULL) == FL_EUNSUPPORTED && strstr(fl_last_error(), "aligned"), "%s", fl_last_error());
    fl_cuda_gemm_args_init(&g, 8, 8, 8);
    g.a = g.b = g.d = fake; g.a_dtype = FL_BF16; g.b_dtype = FL_F32;
    CHECK(fl_cuda_gemm(&g, NULL) == FL_EUNSUPPORTED && strstr(fl_last_error(), "two bf16"), "%s", fl_last_error());
    g.b_dtype = FL_BF16; g.fast_accum = true;
    CHECK(fl_cuda_gemm(&g, NULL) == FL_EINVAL && strstr(fl_last_error(), "fast_accum"), "%s", fl_last_error());
    g.fast_accum = false; g.k = 0;
    CHECK(fl_cuda_gemm(&g, NULL) == FL_EINVAL, "k = 0: %s", fl_last_error());
    g.k = 8; g.lda = 4;
    CHECK(fl_cuda_gemm(&g, NULL) == FL_EINVAL && strstr(fl_last_error(), "leading"), "%s", fl_last_error());

    CHECK(fl_cuda_cast_transpose(fake, FL_E4M3, 4, 4, FL_E4M3, ff, NULL, fake, NULL, NULL, NULL, NULL) ==
          FL_EUNSUPPORTED, "an fp8 source: %s", fl_last_error());
    CHECK(fl_cuda_cast_transpose(fake, FL_F32, 4, 4, FL_BF16, ff, NULL, fake, NULL, NULL, NULL, NULL) == FL_EINVAL,
          "a bf16 target: %s", fl_last_error());
    CHECK(fl_cuda_cast_transpose(fake, FL_F32, 4, 4, FL_E4M3, ff, NULL, NULL, NULL, NULL, NULL, NULL) == FL_EINVAL,
          "no outputs: %s", fl_last_error());
    CHECK(fl_cuda_cast_transpose(fake, FL_F32, 4, 4, FL_E4M3, NULL, NULL, fake, NULL, NULL, NULL, NULL) == FL_EINVAL,
          "no scale: %s", fl_last_error());
    CHECK(fl_cuda_cast_transpose_rowwise(fake, FL_BF16, 4, 4, FL_E5M2, 0, true, NULL, ff, fake, fake, NULL, NULL) ==
          FL_EINVAL, "no row amax: %s", fl_last_error());
    CHECK(fl_cuda_cast_transpose_rowwise(fake, FL_BF16, 4, 4, FL_E5M2, 65, true, ff, ff, fake, fake, NULL, NULL) ==
          FL_EINVAL, "margin 65: %s", fl_last_error());
    CHECK(fl_cuda_adamw(ff, ff, ff, ff, NULL, 4, 1e-3, 0.9, 0.999, 1e-8, 0.0, 0, NULL) == FL_EINVAL &&
          strstr(fl_last_error(), "step counts from 1"), "%s", fl_last_error());
    CHECK(fl_cuda_adamw(ff, ff, ff, ff, NULL, 4, 1e-3, 1.0, 0.999, 1e-8, 0.0, 1, NULL) == FL_EINVAL, "beta1 = 1");
    msamp_state s;
    msamp_init(&s, MSAMP_CFGS[1], 4, 1);
    fl_cuda_msamp_args a = msamp_args(&s, 1e-3, 1);
    a.m_dtype = FL_F16;
    CHECK(fl_cuda_msamp_adamw(&a, (unsigned *)fake, NULL) == FL_EINVAL && strstr(fl_last_error(), "first moment"),
          "%s", fl_last_error());
    a.m_dtype = FL_E4M3; a.v_scale_inv = NULL;
    CHECK(fl_cuda_msamp_adamw(&a, (unsigned *)fake, NULL) == FL_EINVAL, "fp16 v without a scale");
    a.v_scale_inv = &s.vsi;
    CHECK(fl_cuda_msamp_adamw(&a, NULL, NULL) == FL_EINVAL && strstr(fl_last_error(), "work"), "%s", fl_last_error());
    msamp_free(&s);
}

/* ---- cast + transpose ------------------------------------------------------------------------------ */

/* Shapes: full 64×64 tiles, partial edge tiles, rows not a multiple of 16 (bytewise transposed
 * stores), cols not a multiple of the vector width (scalar loads), a single row. `off` shifts the
 * source and out_t by one element off their alignment (scalar paths). */
TEST(gpu_cast_transpose_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    pool pl = { d, { 0 }, 0 };
    struct { int64_t r, c; int off; } shapes[] = { { 256, 512, 0 }, { 100, 37, 0 }, { 333, 1024, 0 },
                                                   { 64, 48, 0 }, { 1, 17, 0 }, { 128, 192, 1 }, { 96, 200, 0 } };
    const fl_dtype srcs[] = { FL_F32, FL_BF16, FL_F16 }, fmts[] = { FL_E4M3, FL_E5M2 };
    const float scales[] = { 1.0f, 0.37f, 1024.0f };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t R = shapes[si].r, C = shapes[si].c;
        int off = shapes[si].off;
        size_t n = (size_t)(R * C);
        float *x = malloc(n * 4), *xw = malloc(n * 4);
        void *buf = malloc(n * 4);
        uint8_t *ref = malloc(n), *ref_t = malloc(n), *got = malloc(n), *got_t = malloc(n + 1);
        fill_test_data(x, n, 100 + si, true);
        for (int s = 0; s < 3; s++)
            for (int f = 0; f < 2; f++)
                for (int k = 0; k < 3; k++) {
                    size_t es = as_dtype(x, n, srcs[s], buf, xw);
                    uint8_t *dsrc_base = dalloc(&pl, (n + 1) * es), *dsrc = dsrc_base + off * es;
                    REQUIRE(dsrc_base, "alloc: %s", fl_last_error());
                    REQUIRE_OK(d->from_host(dsrc, buf, n * es));
                    uint8_t *dout = dalloc(&pl, n), *dout_t = dalloc(&pl, n + 1);
                    float slot0 = k == 1 ? 1e9f : 3.0f;   /* a history slot 0 that already holds an amax */
                    float *dscale = dput(&pl, &scales[k], 4), *dsinv = dalloc(&pl, 4), *dslot = dput(&pl, &slot0, 4);
                    fl_cuda_qstats zero = { 0, 0, 0, 0, 0 }, qs;
                    fl_cuda_qstats *dstats = dput(&pl, &zero, sizeof zero);
                    REQUIRE(dsrc_base && dout && dout_t && dscale && dsinv && dslot && dstats, "alloc: %s", fl_last_error());
                    REQUIRE_OK(fl_cuda_cast_transpose(dsrc, srcs[s], R, C, fmts[f], dscale, dsinv, dout, dout_t + off,
                                                      dstats, dslot, NULL));
                    float sinv, slot;
                    REQUIRE_OK(d->to_host(got, dout, n));
                    REQUIRE_OK(d->to_host(got_t, dout_t + off, n));
                    REQUIRE_OK(d->to_host(&qs, dstats, sizeof qs));
                    REQUIRE_OK(d->to_host(&sinv, dsinv, 4));
                    REQUIRE_OK(d->to_host(&slot, dslot, 4));
                    fl_cast_stats rs;
                    REQUIRE_OK(fl_quantize_f32(xw, ref, n, fmts[f], scales[k], FL_SATURATE, &rs));
                    for (int64_t r = 0; r < R; r++)
                        for (int64_t c = 0; c < C; c++) ref_t[c * R + r] = ref[r * C + c];
                    size_t first = 0;
                    int bad = count_mismatches(got, ref, n, &first), bad_t = count_mismatches(got_t, ref_t, n, &first);
                    char what[128];
                    snprintf(what, sizeof what, "[%lld, %lld]%s %s->%s scale %g", (long long)R, (long long)C,
                             off ? " misaligned" : "", fl_format(srcs[s])->name, fl_format(fmts[f])->name, scales[k]);
                    CHECK(bad == 0 && bad_t == 0, "%s: %d row-major and %d transposed bytes differ", what, bad, bad_t);
                    CHECK_STATS(stats_of(&qs), rs, what);
                    CHECK(bits_of(sinv) == bits_of(1.0f / scales[k]), "%s: scale_inv %a", what, sinv);
                    float want_slot = rs.nan ? NAN : (rs.amax > slot0 ? rs.amax : slot0);
                    CHECK(same_float(slot, want_slot), "%s: recorded amax %g, want %g", what, slot, want_slot);
                    pool_free(&pl);
                }
        free(x); free(xw); free(buf); free(ref); free(ref_t); free(got); free(got_t);
    }
}

/* Per-row current scaling: the row amaxes, the rule's scales (pow2 or not, with margins), the bytes of
 * both copies and the counters, against format.c row by row. */
TEST(gpu_cast_transpose_rowwise_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    pool pl = { d, { 0 }, 0 };
    struct { int64_t r, c; } shapes[] = { { 128, 256 }, { 77, 130 }, { 300, 64 } };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int s = 0; s < 2; s++)
            for (int v = 0; v < 4; v++) {
                int64_t R = shapes[si].r, C = shapes[si].c;
                size_t n = (size_t)(R * C);
                fl_dtype sdt = s ? FL_BF16 : FL_F32, fmt = v & 1 ? FL_E5M2 : FL_E4M3;
                bool pow2 = v >= 2;
                int margin = v == 1 ? 2 : 0;
                float *x = malloc(n * 4), *xw = malloc(n * 4), *ramax = malloc(R * 4), *rsinv = malloc(R * 4);
                void *buf = malloc(n * 4);
                uint8_t *ref = malloc(n), *got = malloc(n), *got_t = malloc(n);
                fill_test_data(x, n, 500 + si * 8 + v, true);
                for (size_t i = 0; i < (size_t)C; i++) x[3 * C + i] = 0.0f;   /* an all-zero row: amax floor */
                as_dtype(x, n, sdt, buf, xw);
                void *dsrc = dput(&pl, buf, n * fl_format(sdt)->size);
                uint8_t *dout = dalloc(&pl, n), *dout_t = dalloc(&pl, n);
                float *damax = dalloc(&pl, R * 4), *dsinv = dalloc(&pl, R * 4);
                fl_cuda_qstats zero = { 0, 0, 0, 0, 0 }, qs;
                fl_cuda_qstats *dstats = dput(&pl, &zero, sizeof zero);
                REQUIRE(dsrc && dout && dout_t && damax && dsinv && dstats, "alloc: %s", fl_last_error());
                REQUIRE_OK(fl_cuda_cast_transpose_rowwise(dsrc, sdt, R, C, fmt, margin, pow2, damax, dsinv, dout,
                                                          dout_t, dstats, NULL));
                REQUIRE_OK(d->to_host(got, dout, n));
                REQUIRE_OK(d->to_host(got_t, dout_t, n));
                REQUIRE_OK(d->to_host(ramax, damax, R * 4));
                REQUIRE_OK(d->to_host(rsinv, dsinv, R * 4));
                REQUIRE_OK(d->to_host(&qs, dstats, sizeof qs));
                fl_cast_stats total = { 0, 0, 0, 0 }, rs;
                int bad_rows = 0, bad = 0, bad_t = 0;
                for (int64_t r = 0; r < R; r++) {
                    const float *row = xw + r * C;
                    float a = fl_amax_f32(row, (size_t)C);
                    float sc = fl_scale_for(a > FL_AMAX_FLOOR ? a : FL_AMAX_FLOOR, fmt, margin, pow2, 1.0f);
                    REQUIRE_OK(fl_quantize_f32(row, ref + r * C, (size_t)C, fmt, sc, FL_SATURATE, &rs));
                    if (rs.amax > total.amax) total.amax = rs.amax;
                    total.underflow += rs.underflow; total.saturated += rs.saturated; total.nan += rs.nan;
                    bad_rows += bits_of(ramax[r]) != bits_of(a) || bits_of(rsinv[r]) != bits_of(1.0f / sc);
                    for (int64_t c = 0; c < C; c++) {
                        bad += got[r * C + c] != ref[r * C + c];
                        bad_t += got_t[c * R + r] != ref[r * C + c];
                    }
                }
                char what[128];
                snprintf(what, sizeof what, "[%lld, %lld] %s->%s margin %d pow2 %d", (long long)R, (long long)C,
                         fl_format(sdt)->name, fl_format(fmt)->name, margin, pow2);
                CHECK(bad_rows == 0, "%s: %d rows with a different amax or scale_inv", what, bad_rows);
                CHECK(bad == 0 && bad_t == 0, "%s: %d row-major and %d transposed bytes differ", what, bad, bad_t);
                CHECK_STATS(stats_of(&qs), total, what);
                pool_free(&pl);
                free(x); free(xw); free(ramax); free(rsinv); free(buf); free(ref); free(got); free(got_t);
            }
}

/* ---- GEMMs -------------------------------------------------------------------------------------------- */

/* Random FP8 codes (no NaN, no inf) and their exact values. */
static void rand_fp8(uint8_t *q, float *val, size_t n, fl_dtype fmt, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        uint8_t b;
        do {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            b = (uint8_t)(s >> 24);
        } while (fmt == FL_E4M3 ? (b & 0x7f) == 0x7f : (b & 0x7c) == 0x7c);
        q[i] = b;
        val[i] = fl_fp8_to_f32(b, fmt);
    }
}

/* ref[i][j] = alpha·Σ_l opA(i, l)·opB(l, j) (+ bias[j]) and S[i][j] = |alpha|·Σ_l |opA·opB| in double. */
static void ref_gemm(const float *A, const float *B, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                     bool a_t, bool b_t, double alpha, const float *bias, double *ref, double *S) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0.0, sa = 0.0;
            for (int64_t l = 0; l < k; l++) {
                double a = a_t ? A[l * lda + i] : A[i * lda + l], b = b_t ? B[l * ldb + j] : B[j * ldb + l];
                acc += a * b;
                sa += fabs(a * b);
            }
            ref[i * n + j] = alpha * acc + (bias ? bias[j] : 0.0);
            S[i * n + j] = fabs(alpha) * sa;
        }
}

/* D (m×n, dense, read back as fp32) against ref: |d − ref| ≤ tol_s·S + tol_r·|ref|. Prints the largest
 * err/S seen, which is what a first GPU run should look at if a bound turns out too tight. */
static int check_gemm(int *fl__failed, const float *got, const double *ref, const double *S, int64_t m, int64_t n,
                      double tol_s, double tol_r, const char *what) {
    int bad = 0;
    double worst = 0.0;
    for (int64_t i = 0; i < m * n; i++) {
        double err = fabs((double)got[i] - ref[i]), lim = tol_s * S[i] + tol_r * fabs(ref[i]) + 1e-30;
        if (S[i] > 0 && err / S[i] > worst) worst = err / S[i];
        if (!(err <= lim)) {
            if (!bad) CHECK(0, "%s: D[%lld][%lld] = %.9g, ref %.9g (S %.3g, err %.3g > %.3g)", what,
                            (long long)(i / n), (long long)(i % n), got[i], ref[i], S[i], err, lim);
            bad++;
        }
    }
    CHECK(bad == 0, "%s: %d of %lld outside the bound", what, bad, (long long)(m * n));
    printf("  %-62s max |err|/S = %.2e\n", what, worst);
    return bad;
}

/* The range max |D| can take when every element is within tol_s·S + tol_r·|ref| of ref. */
static void amax_range(const double *ref, const double *S, size_t n, double tol_s, double tol_r, double *lo, double *hi) {
    *lo = *hi = 0.0;
    for (size_t i = 0; i < n; i++) {
        double t = tol_s * S[i] + tol_r * fabs(ref[i]), a = fabs(ref[i]);
        if (a - t > *lo) *lo = a - t;
        if (a + t > *hi) *hi = a + t;
    }
}

static void d_to_f32(const void *raw, fl_dtype dt, float *out, size_t n) {
    if (dt == FL_F32) memcpy(out, raw, n * 4);
    else if (dt == FL_BF16) fl_bf16_to_f32_n(raw, out, n);
    else fl_f16_to_f32_n(raw, out, n);
}

/* FP8 GEMMs on tensor cores, fast or split accumulation: gpu_test.h fp8_mma_tol. */
static double fp8_tol(bool fast, int64_t k) { (void)fast; return fp8_mma_tol(k); }

TEST(gpu_fp8_gemm_matches_decoded_reference) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    pool pl = { d, { 0 }, 0 };
    struct { int64_t m, n, k; } shapes[] = { { 64, 128, 256 }, { 200, 96, 512 } };
    const fl_dtype pairs[][2] = { { FL_E4M3, FL_E4M3 }, { FL_E5M2, FL_E4M3 }, { FL_E4M3, FL_E5M2 } };
    for (size_t si = 0; si < 2; si++)
        for (int pi = 0; pi < 3; pi++)
            for (int v = 0; v < 8; v++) {
                int64_t M = shapes[si].m, N = shapes[si].n, K = shapes[si].k;
                fl_dtype adt = pairs[pi][0], bdt = pairs[pi][1], ddt = v & 1 ? FL_BF16 : FL_F32;
                bool fast = v & 2, with_bias = v & 4, accumulate = v == 4;   /* v = 4: fp32 D += with bias */
                uint8_t *qa = malloc(M * K), *qb = malloc(N * K);
                float *fa = malloc(M * K * 4), *fb = malloc(N * K * 4), *bias = malloc(N * 4), *got = malloc(M * N * 4),
                      *d0 = malloc(M * N * 4);
                uint16_t *bias16 = malloc(N * 2);
                double *ref = malloc(M * N * 8), *S = malloc(M * N * 8);
                void *raw = malloc(M * N * 4);
                rand_fp8(qa, fa, (size_t)(M * K), adt, 7 + si * 10 + pi);
                rand_fp8(qb, fb, (size_t)(N * K), bdt, 8 + si * 10 + pi);
                fl_rng r;
                fl_rng_seed(&r, 40 + v);
                fl_rng_normal(&r, bias, (size_t)N, 0.0f, 100.0f);
                fl_f32_to_bf16_n(bias, bias16, (size_t)N);
                fl_bf16_to_f32_n(bias16, bias, (size_t)N);
                fl_rng_normal(&r, d0, (size_t)(M * N), 0.0f, 1000.0f);
                const float sa = 0.37f, sb = 2.0f;
                ref_gemm(fa, fb, M, N, K, K, K, false, false, (double)sa * sb, with_bias ? bias : NULL, ref, S);
                if (accumulate) for (int64_t i = 0; i < M * N; i++) ref[i] += d0[i];
                fl_cuda_gemm_args g;
                fl_cuda_gemm_args_init(&g, M, N, K);
                g.a = dput(&pl, qa, M * K); g.b = dput(&pl, qb, N * K);
                g.d = accumulate ? dput(&pl, d0, M * N * 4) : dalloc(&pl, M * N * 4);
                g.a_dtype = adt; g.b_dtype = bdt; g.d_dtype = ddt;
                g.a_scale_inv = dput(&pl, &sa, 4); g.b_scale_inv = dput(&pl, &sb, 4);
                g.d_amax = dalloc(&pl, 4);
                if (with_bias) { g.bias = dput(&pl, bias16, N * 2); g.bias_dtype = FL_BF16; }
                g.fast_accum = fast; g.accumulate = accumulate;
                REQUIRE(g.a && g.b && g.d && g.a_scale_inv && g.b_scale_inv && g.d_amax && (!with_bias || g.bias),
                        "alloc: %s", fl_last_error());
                char what[160];
                snprintf(what, sizeof what, "fp8 %s x %s -> %s [%lld %lld %lld]%s%s%s", fl_format(adt)->name,
                         fl_format(bdt)->name, fl_format(ddt)->name, (long long)M, (long long)N, (long long)K,
                         fast ? " fast" : "", with_bias ? " bias" : "", accumulate ? " accumulate" : "");
                fl_status st = fl_cuda_gemm(&g, NULL);
                CHECK(st == FL_OK, "%s: %s", what, fl_last_error());
                if (st == FL_OK) {
                    float amax;
                    REQUIRE_OK(d->to_host(raw, g.d, M * N * fl_format(ddt)->size));
                    REQUIRE_OK(d->to_host(&amax, g.d_amax, 4));
                    d_to_f32(raw, ddt, got, (size_t)(M * N));
                    double tol_r = ddt == FL_BF16 ? ldexp(1.0, -8) : ldexp(1.0, -22);
                    check_gemm(fl__failed, got, ref, S, M, N, fp8_tol(fast, K), tol_r, what);
                    double lo, hi;
                    amax_range(ref, S, (size_t)(M * N), fp8_tol(fast, K), tol_r, &lo, &hi);
                    CHECK(amax >= lo && amax <= hi, "%s: amax %.9g outside [%.9g, %.9g]", what, amax, lo, hi);
                }
                pool_free(&pl);
                free(qa); free(qb); free(fa); free(fb); free(bias); free(bias16); free(got); free(d0); free(ref);
                free(S); free(raw);
            }
}

/* An FP8 D (E4M3 with a d_scale): every byte is the rounding of some value within the FP8 GEMM's
 * bound (fp8_mma_tol) of d_scale·ref, and d_amax is max |D| before d_scale. */
TEST(gpu_fp8_gemm_fp8_output) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    pool pl = { d, { 0 }, 0 };
    const int64_t M = 128, N = 64, K = 256;
    uint8_t *qa = malloc(M * K), *qb = malloc(N * K), *got = malloc(M * N);
    float *fa = malloc(M * K * 4), *fb = malloc(N * K * 4);
    double *ref = malloc(M * N * 8), *S = malloc(M * N * 8);
    rand_fp8(qa, fa, (size_t)(M * K), FL_E4M3, 71);
    rand_fp8(qb, fb, (size_t)(N * K), FL_E4M3, 72);
    const float sa = 1.0f / 64, sb = 1.0f / 32;
    ref_gemm(fa, fb, M, N, K, K, K, false, false, (double)sa * sb, NULL, ref, S);
    double rmax = 0.0;
    for (int64_t i = 0; i < M * N; i++) rmax = fabs(ref[i]) > rmax ? fabs(ref[i]) : rmax;
    const float ds = (float)(300.0 / rmax);
    fl_cuda_gemm_args g;
    fl_cuda_gemm_args_init(&g, M, N, K);
    g.a = dput(&pl, qa, M * K); g.b = dput(&pl, qb, N * K); g.d = dalloc(&pl, M * N);
    g.a_dtype = g.b_dtype = g.d_dtype = FL_E4M3;
    g.a_scale_inv = dput(&pl, &sa, 4); g.b_scale_inv = dput(&pl, &sb, 4); g.d_scale = dput(&pl, &ds, 4);
    g.d_amax = dalloc(&pl, 4);
    REQUIRE(g.a && g.b && g.d && g.a_scale_inv && g.b_scale_inv && g.d_scale && g.d_amax, "alloc: %s", fl_last_error());
    REQUIRE_OK(fl_cuda_gemm(&g, NULL));
    float amax;
    REQUIRE_OK(d->to_host(got, g.d, M * N));
    REQUIRE_OK(d->to_host(&amax, g.d_amax, 4));
    int bad = 0;
    for (int64_t i = 0; i < M * N; i++) {
        double tol = fp8_tol(false, K) * S[i] + ldexp(fabs(ref[i]), -22);
        float lo = fl_e4m3_to_f32(fl_f32_to_e4m3((float)((ref[i] - tol) * ds), FL_SATURATE));
        float hi = fl_e4m3_to_f32(fl_f32_to_e4m3((float)((ref[i] + tol) * ds), FL_SATURATE));
        float v = fl_e4m3_to_f32(got[i]);
        if (!(v >= lo && v <= hi) && bad++ == 0)
            CHECK(0, "D[%lld] = %g, want within [%g, %g] (ref·d_scale %g)", (long long)i, v, lo, hi, ref[i] * ds);
    }
    CHECK(bad == 0, "%d of %lld FP8 outputs off", bad, (long long)(M * N));
    double lo, hi;
    amax_range(ref, S, (size_t)(M * N), fp8_tol(false, K), ldexp(1.0, -22), &lo, &hi);
    CHECK(amax >= lo && amax <= hi, "amax %.9g outside [%.9g, %.9g] (max |D| before d_scale)", amax, lo, hi);
    pool_free(&pl);
    free(qa); free(qb); free(got); free(fa); free(fb); free(ref); free(S);
}

/* The three GEMMs of an FP8 linear from cast_transpose's copies, as the layer will run them:
 * fprop x·Wᵀ, dgrad dY·W (B = Wᵀ copy), wgrad dYᵀ·x (A = dYᵀ copy, B = xᵀ copy). */
TEST(gpu_fp8_linear_gemms_from_transposed_copies) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    pool pl = { d, { 0 }, 0 };
    const int64_t T = 128, IN = 256, OUT = 192;
    float *x = malloc(T * IN * 4), *w = malloc(OUT * IN * 4), *dy = malloc(T * OUT * 4);
    fl_rng r;
    fl_rng_seed(&r, 77);
    fl_rng_normal(&r, x, (size_t)(T * IN), 0.0f, 1.0f);
    fl_rng_normal(&r, w, (size_t)(OUT * IN), 0.0f, 0.05f);
    fl_rng_normal(&r, dy, (size_t)(T * OUT), 0.0f, 1e-3f);
    struct { const float *src; int64_t R, C; fl_dtype fmt; float scale; uint8_t *q, *qt; float *val, *val_t; } ops[3] = {
        { x, T, IN, FL_E4M3, 100.0f, NULL, NULL, NULL, NULL }, { w, OUT, IN, FL_E4M3, 2000.0f, NULL, NULL, NULL, NULL },
        { dy, T, OUT, FL_E5M2, 1e6f, NULL, NULL, NULL, NULL } };
    for (int i = 0; i < 3; i++) {
        size_t n = (size_t)(ops[i].R * ops[i].C);
        uint8_t *host = malloc(n);
        ops[i].val = malloc(n * 4); ops[i].val_t = malloc(n * 4);
        REQUIRE_OK(fl_quantize_f32(ops[i].src, host, n, ops[i].fmt, ops[i].scale, FL_SATURATE, NULL));
        for (int64_t a = 0; a < ops[i].R; a++)
            for (int64_t b = 0; b < ops[i].C; b++) {
                float v = fl_fp8_to_f32(host[a * ops[i].C + b], ops[i].fmt);
                ops[i].val[a * ops[i].C + b] = v;
                ops[i].val_t[b * ops[i].R + a] = v;
            }
        free(host);
        void *dsrc = dput(&pl, ops[i].src, n * 4);
        float *dscale = dput(&pl, &ops[i].scale, 4);
        ops[i].q = dalloc(&pl, n); ops[i].qt = dalloc(&pl, n);
        REQUIRE(dsrc && dscale && ops[i].q && ops[i].qt, "alloc: %s", fl_last_error());
        REQUIRE_OK(fl_cuda_cast_transpose(dsrc, FL_F32, ops[i].R, ops[i].C, ops[i].fmt, dscale, NULL, ops[i].q,
                                          ops[i].qt, NULL, NULL, NULL));
    }
    float sinv[3] = { 1.0f / ops[0].scale, 1.0f / ops[1].scale, 1.0f / ops[2].scale };
    float *dsinv = dput(&pl, sinv, 12);
    REQUIRE(dsinv, "alloc");
    struct { const char *name; int a, b; bool at, bt; int64_t m, n, k; bool fast; } gs[3] = {
        { "fprop x.W^T", 0, 1, false, false, T, OUT, IN, true },
        { "dgrad dY.W", 2, 1, false, true, T, IN, OUT, false },
        { "wgrad dY^T.x", 2, 0, true, true, OUT, IN, T, false } };
    for (int i = 0; i < 3; i++) {
        int64_t M = gs[i].m, N = gs[i].n, K = gs[i].k;
        fl_cuda_gemm_args g;
        fl_cuda_gemm_args_init(&g, M, N, K);
        g.a = gs[i].at ? ops[gs[i].a].qt : ops[gs[i].a].q;   /* the [m, k] copy */
        g.b = gs[i].bt ? ops[gs[i].b].qt : ops[gs[i].b].q;   /* the [n, k] copy */
        g.a_dtype = ops[gs[i].a].fmt; g.b_dtype = ops[gs[i].b].fmt; g.d_dtype = FL_F32;
        g.a_scale_inv = dsinv + gs[i].a; g.b_scale_inv = dsinv + gs[i].b;
        g.fast_accum = gs[i].fast;
        g.d = dalloc(&pl, M * N * 4);
        REQUIRE(g.d, "alloc");
        REQUIRE_OK(fl_cuda_gemm(&g, NULL));
        float *got = malloc(M * N * 4);
        double *ref = malloc(M * N * 8), *S = malloc(M * N * 8);
        REQUIRE_OK(d->to_host(got, g.d, M * N * 4));
        const float *A = gs[i].at ? ops[gs[i].a].val_t : ops[gs[i].a].val;
        const float *B = gs[i].bt ? ops[gs[i].b].val_t : ops[gs[i].b].val;
        ref_gemm(A, B, M, N, K, K, K, false, false, (double)sinv[gs[i].a] * sinv[gs[i].b], NULL, ref, S);
        check_gemm(fl__failed, got, ref, S, M, N, fp8_tol(gs[i].fast, K), ldexp(1.0, -22), gs[i].name);
        free(got); free(ref); free(S);
    }
    for (int i = 0; i < 3; i++) { free(ops[i].val); free(ops[i].val_t); }
    pool_free(&pl);
    free(x); free(w); free(dy);
}

/* bf16/fp16/fp32 GEMMs in every layout, with bias through cuBLASLt's epilogue (bias in D's dtype) or
 * our add (another dtype), accumulate, and amax. */
TEST(gpu_hp_gemm_matches_reference) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    pool pl = { d, { 0 }, 0 };
    const int64_t M = 96, N = 80, K = 136;
    struct { fl_dtype in, out, bias; bool at, bt, acc; } cases[] = {
        { FL_BF16, FL_BF16, FL_BF16, false, false, false }, { FL_BF16, FL_F32, FL_F32, true, false, false },
        { FL_BF16, FL_BF16, FL_F32, false, true, false },   { FL_F16, FL_F16, FL_F16, true, true, false },
        { FL_F32, FL_F32, FL_F32, false, false, true },     { FL_F32, FL_F32, FL_BF16, true, true, false } };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        fl_dtype in = cases[ci].in, out = cases[ci].out;
        bool at = cases[ci].at, bt = cases[ci].bt;
        int64_t lda = at ? M + 8 : K + 8, ldb = bt ? N + 8 : K + 8, ldd = N + 16;   /* padded rows */
        size_t na = (size_t)((at ? K : M) * lda), nb = (size_t)((bt ? K : N) * ldb);
        float *fa = malloc(na * 4), *fb = malloc(nb * 4), *bias = malloc(N * 4), *d0 = malloc(M * ldd * 4),
              *got = malloc(M * N * 4);
        void *ra = malloc(na * 4), *rb = malloc(nb * 4), *rbias = malloc(N * 4), *rd = malloc(M * ldd * 4);
        double *ref = malloc(M * N * 8), *S = malloc(M * N * 8);
        fl_rng r;
        fl_rng_seed(&r, 900 + ci);
        fl_rng_normal(&r, fa, na, 0.0f, 1.0f);
        fl_rng_normal(&r, fb, nb, 0.0f, 1.0f);
        fl_rng_normal(&r, bias, (size_t)N, 0.0f, 3.0f);
        fl_rng_normal(&r, d0, (size_t)(M * ldd), 0.0f, 5.0f);
        as_dtype(fa, na, in, ra, fa);
        as_dtype(fb, nb, in, rb, fb);
        as_dtype(bias, (size_t)N, cases[ci].bias, rbias, bias);
        if (cases[ci].acc) as_dtype(d0, (size_t)(M * ldd), out, rd, d0);
        ref_gemm(fa, fb, M, N, K, lda, ldb, at, bt, 1.0, bias, ref, S);
        if (cases[ci].acc) for (int64_t i = 0; i < M; i++) for (int64_t j = 0; j < N; j++) ref[i * N + j] += d0[i * ldd + j];
        fl_cuda_gemm_args g;
        fl_cuda_gemm_args_init(&g, M, N, K);
        g.lda = lda; g.ldb = ldb; g.ldd = ldd; g.a_trans = at; g.b_trans = bt;
        g.a_dtype = g.b_dtype = in; g.d_dtype = out;
        g.a = dput(&pl, ra, na * esz(in)); g.b = dput(&pl, rb, nb * esz(in));
        g.d = cases[ci].acc ? dput(&pl, rd, M * ldd * esz(out)) : dalloc(&pl, M * ldd * esz(out));
        g.bias = dput(&pl, rbias, N * esz(cases[ci].bias)); g.bias_dtype = cases[ci].bias;
        g.accumulate = cases[ci].acc;
        g.d_amax = dalloc(&pl, 4);
        REQUIRE(g.a && g.b && g.d && g.bias && g.d_amax, "alloc: %s", fl_last_error());
        char what[160];
        snprintf(what, sizeof what, "%s%s x %s%s -> %s, %s bias%s", fl_format(in)->name, at ? "^T" : "",
                 fl_format(in)->name, bt ? "" : "^T", fl_format(out)->name, fl_format(cases[ci].bias)->name,
                 cases[ci].acc ? ", accumulate" : "");
        fl_status st = fl_cuda_gemm(&g, NULL);
        CHECK(st == FL_OK, "%s: %s", what, fl_last_error());
        if (st == FL_OK) {
            float amax;
            REQUIRE_OK(d->to_host(rd, g.d, M * ldd * esz(out)));
            REQUIRE_OK(d->to_host(&amax, g.d_amax, 4));
            float *row = malloc(ldd * 4);
            for (int64_t i = 0; i < M; i++) {
                d_to_f32((uint8_t *)rd + i * ldd * esz(out), out, row, (size_t)ldd);
                memcpy(got + i * N, row, N * 4);
            }
            free(row);
            double tol_r = out == FL_F32 ? ldexp(1.0, -22) : out == FL_BF16 ? ldexp(1.0, -7) : ldexp(1.0, -10);
            /* A bias of another dtype than D: cuBLASLt may round the product to D's dtype before adding it
             * (first H100 run: bf16 D, fp32 bias, 1.5 bf16 ulps off), so allow one rounding of Σ|a·b| too. */
            double tol_s = 1e-5 + (cases[ci].bias != out && out != FL_F32 ? tol_r / 2 : 0.0);
            check_gemm(fl__failed, got, ref, S, M, N, tol_s, tol_r, what);
            double lo, hi;
            amax_range(ref, S, (size_t)(M * N), tol_s, tol_r, &lo, &hi);
            CHECK(amax >= lo && amax <= hi, "%s: amax %.9g outside [%.9g, %.9g]", what, amax, lo, hi);
        }
        pool_free(&pl);
        free(fa); free(fb); free(bias); free(d0); free(got); free(ra); free(rb); free(rbias); free(rd); free(ref); free(S);
    }
}

/* The heuristic runs once per (shape, dtypes, layout, epilogue, alignment), not per call. */
TEST(gpu_gemm_heuristic_cached_per_key) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    pool pl = { d, { 0 }, 0 };
    const int64_t M = 32, N = 48, K = 64;
    uint8_t *qa = malloc(M * K), *qb = malloc(N * K);
    float *fa = malloc(M * K * 4), *fb = malloc(N * K * 4), one = 1.0f;
    rand_fp8(qa, fa, (size_t)(M * K), FL_E4M3, 1);
    rand_fp8(qb, fb, (size_t)(N * K), FL_E4M3, 2);
    fl_cuda_gemm_args g;
    fl_cuda_gemm_args_init(&g, M, N, K);
    g.a = dput(&pl, qa, M * K); g.b = dput(&pl, qb, N * K); g.d = dalloc(&pl, M * N * 4);
    g.a_dtype = g.b_dtype = FL_E4M3; g.d_dtype = FL_F32;
    g.a_scale_inv = g.b_scale_inv = dput(&pl, &one, 4);
    REQUIRE(g.a && g.b && g.d && g.a_scale_inv, "alloc");
    size_t c0 = fl_cuda_gemm_heuristic_calls();
    REQUIRE_OK(fl_cuda_gemm(&g, NULL));
    size_t c1 = fl_cuda_gemm_heuristic_calls();
    for (int i = 0; i < 5; i++) REQUIRE_OK(fl_cuda_gemm(&g, NULL));
    size_t c2 = fl_cuda_gemm_heuristic_calls();
    g.m = 16;
    REQUIRE_OK(fl_cuda_gemm(&g, NULL));
    size_t c3 = fl_cuda_gemm_heuristic_calls();
    CHECK(c1 > c0, "first call ran no heuristic (%zu -> %zu)", c0, c1);
    CHECK(c2 == c1, "repeated calls ran the heuristic again (%zu -> %zu)", c1, c2);
    CHECK(c3 > c2, "a new shape ran no heuristic");
    REQUIRE_OK(fl_cuda_synchronize());
    pool_free(&pl);
    free(qa); free(qb); free(fa); free(fb);
}

/* ---- optimizers on the GPU ----------------------------------------------------------- */

TEST(gpu_adamw_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    pool pl = { d, { 0 }, 0 };
    const size_t n = 1000003;
    float *h[4], *got = malloc(n * 4), *dv[4];
    fl_rng r;
    fl_rng_seed(&r, 9);
    for (int k = 0; k < 4; k++) {
        h[k] = malloc(n * 4);
        fl_rng_normal(&r, h[k], n, 0.0f, k == 3 ? 1e-3f : 0.1f);
        if (k == 3) for (size_t i = 0; i < n; i++) h[k][i] *= h[k][i];
        dv[k] = dput(&pl, h[k], n * 4);
        REQUIRE(dv[k], "alloc");
    }
    for (int step = 1; step <= 3; step++) {
        fl_adamw_kernel_f32(h[0], h[1], h[2], h[3], NULL, (int64_t)n, 1e-3, 0.9, 0.999, 1e-8, 0.01, step);
        REQUIRE_OK(fl_cuda_adamw(dv[0], dv[1], dv[2], dv[3], NULL, n, 1e-3, 0.9, 0.999, 1e-8, 0.01, step, NULL));
    }
    for (int k = 0; k < 4; k++) {
        REQUIRE_OK(d->to_host(got, dv[k], n * 4));
        size_t f = 0;
        int bad = count_mismatches((uint8_t *)got, (uint8_t *)h[k], n * 4, &f);
        CHECK(bad == 0, "array %d: %d bytes differ after 3 steps (first at float %zu)", k, bad, f / 4);
    }
    for (int k = 0; k < 4; k++) free(h[k]);
    free(got);
    pool_free(&pl);
}

TEST(gpu_msamp_adamw_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    pool pl = { d, { 0 }, 0 };
    for (size_t ci = 0; ci < sizeof MSAMP_CFGS / sizeof MSAMP_CFGS[0]; ci++) {
        msamp_state cpu, gpu;
        msamp_init(&cpu, MSAMP_CFGS[ci], 300007, 61 + ci);
        msamp_copy(&gpu, &cpu);
        size_t n = cpu.n;
        msamp_cfg c = cpu.c;
        void *dp = dput(&pl, gpu.p, n * esz(c.p)), *dg = dput(&pl, gpu.g, n * esz(c.g)),
             *dm = dput(&pl, gpu.m, n * esz(c.m)), *dvv = dput(&pl, gpu.v, n * esz(c.v));
        uint8_t *dpf = dalloc(&pl, n);
        float *dsi = dput(&pl, &gpu.gsi, 4), *msi = dput(&pl, &gpu.msi, 4), *vsi = dput(&pl, &gpu.vsi, 4),
              *pfsi = dput(&pl, &gpu.pfsi, 4);
        unsigned *work = dalloc(&pl, FL_CUDA_MSAMP_WORK_WORDS * 4);
        REQUIRE(dp && dg && dm && dvv && dpf && dsi && msi && vsi && pfsi && work, "alloc: %s", fl_last_error());
        for (int step = 1; step <= 2; step++) {
            REQUIRE_OK(msamp_cpu_step(&cpu, 1e-3, step));
            fl_cuda_msamp_args a = { dp, c.p, dg, c.g, dsi, dm, c.m, msi, dvv, c.v, vsi, c.o3 ? dpf : NULL, pfsi,
                                     n, 1e-3, 0.9, 0.999, 1e-8, 0.01, step };
            REQUIRE_OK(fl_cuda_msamp_adamw(&a, work, NULL));
            REQUIRE_OK(d->to_host(gpu.p, dp, n * esz(c.p)));
            REQUIRE_OK(d->to_host(gpu.m, dm, n * esz(c.m)));
            REQUIRE_OK(d->to_host(gpu.v, dvv, n * esz(c.v)));
            REQUIRE_OK(d->to_host(gpu.pf, dpf, n));
            REQUIRE_OK(d->to_host(&gpu.msi, msi, 4));
            REQUIRE_OK(d->to_host(&gpu.vsi, vsi, 4));
            REQUIRE_OK(d->to_host(&gpu.pfsi, pfsi, 4));
            if (c.m == FL_F32) gpu.msi = cpu.msi;   /* an fp32 moment has no scale; the buffer is untouched */
            if (c.v == FL_F32) gpu.vsi = cpu.vsi;
            if (!c.o3) { memcpy(gpu.pf, cpu.pf, n); gpu.pfsi = cpu.pfsi; }
            msamp_compare(fl__failed, &gpu, &cpu, "gpu", (int)ci, step);
        }
        msamp_free(&cpu); msamp_free(&gpu);
        pool_free(&pl);
    }
}

#endif /* FL_HAVE_CUDA */
