/* test_tensor.c — tensors: construction errors, views and strides, refcounts, copies and dtype
 * casts, FP8 views that keep their scales, and the Philox generator. References are naive loops. */
#include "runner.h"
#include "tensor.h"
#include "ops.h"
#include "device.h"
#include <stdlib.h>

static fl_tensor *seq(int ndim, const int64_t *shape) {   /* values 0, 1, 2, ... row-major */
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    float *v = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) v[i] = (float)i;
    fl_tensor *t = NULL;
    fl_tensor_from_f32(&t, v, ndim, shape, FL_F32);
    free(v);
    return t;
}

static double at(const fl_tensor *t, int64_t i0, int64_t i1, int64_t i2) {
    int64_t idx[3] = { i0, i1, i2 };
    double v = NAN;
    fl_tensor_get(t, idx, &v);
    return v;
}

/* Sizes that wrap around int64 are refused, by the factories and by expand (issue: numel went negative). */
TEST(tensor_numel_overflow_refused) {
    int64_t n = 0;
    int64_t wrap[2] = { INT64_C(1) << 62, 2 };
    CHECK(fl_shape_numel("x", 2, wrap, &n) == FL_EINVAL, "2^63 elements accepted");
    CHECK(strstr(fl_last_error(), "too large"), "%s", fl_last_error());
    int64_t zero[3] = { INT64_C(1) << 62, 0, INT64_C(1) << 62 };
    REQUIRE_OK(fl_shape_numel("x", 3, zero, &n));
    CHECK(n == 0, "numel %lld", (long long)n);
    fl_tensor *t = NULL, *e = NULL;
    int64_t one[1] = { 1 };
    REQUIRE_OK(fl_tensor_full(&t, FL_F32, 1, one, 1.0, FL_DEV_CPU));
    CHECK(fl_tensor_expand(&e, t, 2, wrap) == FL_EINVAL && e == NULL, "expand to 2^63 elements accepted");
    CHECK(strstr(fl_last_error(), "too large"), "%s", fl_last_error());
    fl_tensor_release(t);
}

/* An empty shape whose other sizes multiply past int64 (issue: zeros{2^31, 2^31, 4, 0} crashed: the saturating numel
 * read it as INT64_MAX elements and the fill ran past the empty storage). torch refuses it ("Storage size calculation
 * overflowed"); an expand to it has 0 strides and 0 elements, as torch's. */
TEST(tensor_empty_shape_with_overflowing_sizes) {
    fl_tensor *t = NULL, *e = NULL;
    int64_t s[4] = { INT64_C(1) << 31, INT64_C(1) << 31, 4, 0 };
    CHECK(fl_tensor_zeros(&t, FL_F32, 4, s, FL_DEV_CPU) == FL_EINVAL && t == NULL, "zeros accepted");
    CHECK(strstr(fl_last_error(), "too large"), "%s", fl_last_error());
    int64_t s2[3] = { 0, INT64_C(1) << 62, 2 };
    CHECK(fl_tensor_empty(&t, FL_F32, 3, s2, FL_DEV_CPU) == FL_EINVAL && t == NULL, "empty accepted");
    int64_t one[1] = { 1 };
    REQUIRE_OK(fl_tensor_full(&t, FL_F32, 1, one, 1.0, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_expand(&e, t, 4, s));
    CHECK(fl_tensor_numel(e) == 0, "numel %lld", (long long)fl_tensor_numel(e));
    fl_tensor_release(e);
    fl_tensor_release(t);
}

TEST(tensor_construct_errors) {
    fl_tensor *t = NULL;
    int64_t bad[3] = { 2, 3, -3 };
    CHECK(fl_tensor_empty(&t, FL_F32, 3, bad, FL_DEV_CPU) == FL_EINVAL, "negative size accepted");
    CHECK(strstr(fl_last_error(), "size must be >= 0, got -3 at dim 3"), "%s", fl_last_error());
    int64_t nine[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
    CHECK(fl_tensor_empty(&t, FL_F32, 9, nine, FL_DEV_CPU) == FL_EINVAL, "9 dims accepted");
    int64_t huge[3] = { INT64_C(1) << 40, INT64_C(1) << 40, 4 };
    CHECK(fl_tensor_empty(&t, FL_F32, 3, huge, FL_DEV_CPU) == FL_EINVAL, "overflowing numel accepted");
    CHECK(strstr(fl_last_error(), "too large"), "%s", fl_last_error());
    int64_t s[2] = { 3, 2 };
    REQUIRE_OK(fl_tensor_zeros(&t, FL_F32, 2, s, FL_DEV_CPU));
    int64_t idx[2] = { 5, 0 };
    double v;
    CHECK(fl_tensor_get(t, idx, &v) == FL_EINVAL, "out of range accepted");
    CHECK(strstr(fl_last_error(), "index 5 out of range for dim 0 of size 3"), "%s", fl_last_error());
    fl_tensor *w = NULL;
    int64_t s5[1] = { 5 };
    CHECK(fl_tensor_view(&w, t, 1, s5) == FL_EINVAL, "bad view accepted");
    CHECK(strstr(fl_last_error(), "shape [5] is invalid for a tensor of 6 elements"), "%s", fl_last_error());
    int64_t two_inf[2] = { -1, -1 };
    CHECK(fl_tensor_view(&w, t, 2, two_inf) == FL_EINVAL, "two -1 accepted");
    fl_tensor_release(t);
}

TEST(tensor_zeros_full_scalar) {
    fl_tensor *t;
    int64_t s[2] = { 2, 3 };
    REQUIRE_OK(fl_tensor_full(&t, FL_BF16, 2, s, 1.5, FL_DEV_CPU));
    CHECK(fl_tensor_numel(t) == 6, "numel");
    CHECK(((uintptr_t)fl_tensor_data(t) & 63) == 0, "not 64-byte aligned");
    CHECK(at(t, 1, 2, 0) == 1.5, "full value %g", at(t, 1, 2, 0));
    fl_tensor_release(t);
    REQUIRE_OK(fl_tensor_zeros(&t, FL_F32, 0, NULL, FL_DEV_CPU));
    CHECK(fl_tensor_numel(t) == 1 && t->ndim == 0, "scalar");
    fl_tensor_release(t);
    int64_t z[2] = { 0, 4 };
    REQUIRE_OK(fl_tensor_zeros(&t, FL_F32, 2, z, FL_DEV_CPU));
    CHECK(fl_tensor_numel(t) == 0, "empty");
    fl_tensor_release(t);
}

TEST(tensor_views_and_refcounts) {
    int64_t s[3] = { 2, 3, 4 };
    fl_tensor *t = seq(3, s), *v, *tr, *r;
    REQUIRE(t, "seq");
    int64_t s2[2] = { -1, 4 };
    REQUIRE_OK(fl_tensor_view(&v, t, 2, s2));
    CHECK(v->shape[0] == 6 && v->shape[1] == 4, "inferred %lld", (long long)v->shape[0]);
    CHECK(t->storage->refcount == 2, "view shares storage (refcount %d)", t->storage->refcount);
    fl_tensor_release(t);                            /* the view keeps the storage alive */
    int64_t idx[2] = { 5, 3 };
    double x;
    REQUIRE_OK(fl_tensor_get(v, idx, &x));
    CHECK(x == 23, "value after releasing the base %g", x);
    REQUIRE_OK(fl_tensor_transpose(&tr, v, -1, 0));   /* [4, 6] */
    CHECK(tr->shape[0] == 4 && tr->stride[0] == 1 && tr->stride[1] == 4, "transpose strides");
    CHECK(!fl_tensor_is_contiguous(tr), "transpose is not contiguous");
    int64_t flat[1] = { 24 };
    fl_tensor *bad = NULL;
    CHECK(fl_tensor_view(&bad, tr, 1, flat) == FL_EINVAL, "view of transpose should fail");
    CHECK(strstr(fl_last_error(), "reshape"), "error suggests reshape: %s", fl_last_error());
    REQUIRE_OK(fl_tensor_reshape(&r, tr, 1, flat));
    float got[24];
    REQUIRE_OK(fl_tensor_read_f32(r, got));
    int bad_n = 0;
    for (int i = 0; i < 4; i++) for (int j = 0; j < 6; j++) bad_n += got[i * 6 + j] != (float)(j * 4 + i);
    CHECK(bad_n == 0, "reshape of transpose has %d wrong values", bad_n);
    /* Splitting a dim of a transposed tensor is a valid view: [4, 6] -> [4, 2, 3]. */
    int64_t s3[3] = { 4, 2, 3 };
    fl_tensor *v3;
    REQUIRE_OK(fl_tensor_view(&v3, tr, 3, s3));
    CHECK(at(v3, 1, 1, 2) == (1 * 3 + 2) * 4 + 1, "split view value %g", at(v3, 1, 1, 2));
    fl_tensor_release(v3);
    fl_tensor_release(r);
    fl_tensor_release(tr);
    fl_tensor_release(v);
}

TEST(tensor_select_narrow_expand) {
    int64_t s[3] = { 2, 3, 4 };
    fl_tensor *t = seq(3, s), *sel, *nar, *e;
    REQUIRE_OK(fl_tensor_select(&sel, t, 1, 2));      /* [2, 4] */
    CHECK(sel->ndim == 2 && sel->shape[1] == 4, "select shape");
    int64_t i2[2] = { 1, 3 };
    double x;
    REQUIRE_OK(fl_tensor_get(sel, i2, &x));
    CHECK(x == 12 + 8 + 3, "select value %g", x);
    CHECK(fl_tensor_select(&e, t, 1, 3) == FL_EINVAL && strstr(fl_last_error(), "index 3 out of range for dim 1 of size 3"), "%s", fl_last_error());
    REQUIRE_OK(fl_tensor_narrow(&nar, t, -1, 1, 2));  /* [2, 3, 2] */
    CHECK(at(nar, 1, 2, 1) == 12 + 8 + 2, "narrow value %g", at(nar, 1, 2, 1));
    int64_t one[2] = { 3, 1 }, ex[3] = { 2, 3, 5 };
    fl_tensor *col;
    REQUIRE_OK(fl_tensor_zeros(&col, FL_F32, 2, one, FL_DEV_CPU));
    int64_t ci[2] = { 2, 0 };
    fl_tensor_set(col, ci, 7);
    REQUIRE_OK(fl_tensor_expand(&e, col, 3, ex));
    CHECK(e->stride[0] == 0 && e->stride[2] == 0, "expanded strides are 0");
    CHECK(at(e, 1, 2, 4) == 7, "expand value");
    fl_tensor *bad = NULL;
    int64_t bx[2] = { 4, 1 };
    CHECK(fl_tensor_expand(&bad, col, 2, bx) == FL_EINVAL && strstr(fl_last_error(), "[3, 1]") && strstr(fl_last_error(), "[4, 1]"),
          "%s", fl_last_error());
    fl_tensor *c;
    REQUIRE_OK(fl_tensor_contiguous(&c, e));
    float v[30];
    REQUIRE_OK(fl_tensor_read_f32(c, v));
    CHECK(v[2 * 5 + 4] == 7 && v[15 + 2 * 5] == 7 && v[5] == 0, "contiguous of expand");
    fl_tensor_release(c); fl_tensor_release(e); fl_tensor_release(col);
    fl_tensor_release(nar); fl_tensor_release(sel); fl_tensor_release(t);
}

TEST(tensor_to_and_copy) {
    enum { N = 1000 };
    float src[N];
    for (int i = 0; i < N; i++) src[i] = (float)(sin(i * 0.37) * pow(10, (i % 11) - 5));
    int64_t s[2] = { 40, 25 };
    fl_tensor *t, *tt, *b, *h;
    REQUIRE_OK(fl_tensor_from_f32(&t, src, 2, s, FL_F32));
    REQUIRE_OK(fl_tensor_transpose(&tt, t, 0, 1));
    REQUIRE_OK(fl_tensor_to(&b, tt, FL_BF16));
    REQUIRE_OK(fl_tensor_to(&h, tt, FL_F16));
    CHECK(fl_tensor_is_contiguous(b), "to() gives contiguous");
    const uint16_t *pb = fl_tensor_data(b), *ph = fl_tensor_data(h);
    int bad = 0;
    for (int i = 0; i < 25; i++)
        for (int j = 0; j < 40; j++) {
            float x = src[j * 25 + i];
            bad += pb[i * 40 + j] != fl_f32_to_bf16(x);
            bad += ph[i * 40 + j] != fl_f32_to_f16(x);
        }
    CHECK(bad == 0, "%d elements not rounded like the scalar RNE casts", bad);
    /* copy_ a bf16 transposed view back into a strided fp32 destination */
    fl_tensor *dst, *dt;
    int64_t s2[2] = { 40, 25 };
    REQUIRE_OK(fl_tensor_zeros(&dst, FL_F32, 2, s2, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_transpose(&dt, dst, 0, 1));
    REQUIRE_OK(fl_tensor_copy_(dt, b));
    const float *pd = fl_tensor_data(dst);
    bad = 0;
    for (int i = 0; i < N; i++) bad += pd[i] != fl_bf16_to_f32(fl_f32_to_bf16(src[i]));
    CHECK(bad == 0, "copy_ wrong in %d places", bad);
    fl_tensor *small;
    int64_t s3[1] = { 3 };
    REQUIRE_OK(fl_tensor_zeros(&small, FL_F32, 1, s3, FL_DEV_CPU));
    CHECK(fl_tensor_copy_(small, t) == FL_EINVAL && strstr(fl_last_error(), "[3]") && strstr(fl_last_error(), "[40, 25]"), "%s", fl_last_error());
    fl_tensor *fp8 = NULL;
    CHECK(fl_tensor_to(&fp8, t, FL_E4M3) == FL_EINVAL && strstr(fl_last_error(), "quantize"), "%s", fl_last_error());
    fl_tensor_release(small); fl_tensor_release(dt); fl_tensor_release(dst);
    fl_tensor_release(h); fl_tensor_release(b); fl_tensor_release(tt); fl_tensor_release(t);
}

/* Per-row FP8: views must keep each value paired with its row's scale. */
TEST(tensor_fp8_views_keep_scales) {
    float src[12];
    for (int i = 0; i < 12; i++) src[i] = (float)((i + 1) * (i / 4 + 1) * (i % 2 ? -1 : 1)) * powf(10, (float)(i / 4));
    int64_t s[2] = { 3, 4 };
    fl_tensor *t, *q, *qt, *deq;
    REQUIRE_OK(fl_tensor_from_f32(&t, src, 2, s, FL_F32));
    fl_quant_opts o;
    fl_quant_opts_default(&o);
    o.axis = 0;
    REQUIRE_OK(fl_quantize(&q, t, FL_E4M3, &o));
    CHECK(q->scale_axis == 0 && fl_tensor_numel(q->scale_inv) == 3, "per-row scale");
    float ref[12];
    REQUIRE_OK(fl_tensor_read_f32(q, ref));
    REQUIRE_OK(fl_tensor_transpose(&qt, q, 0, 1));
    CHECK(qt->scale_axis == 1 && qt->scale_inv == q->scale_inv && q->scale_inv->refcount == 2, "transpose keeps the axis");
    float got[12];
    REQUIRE_OK(fl_tensor_read_f32(qt, got));
    int bad = 0;
    for (int i = 0; i < 3; i++) for (int j = 0; j < 4; j++) bad += got[j * 3 + i] != ref[i * 4 + j];
    CHECK(bad == 0, "transposed per-row tensor reads %d wrong values", bad);
    REQUIRE_OK(fl_dequantize(&deq, qt, FL_F32));
    const float *pd = fl_tensor_data(deq);
    bad = 0;
    for (int i = 0; i < 3; i++) for (int j = 0; j < 4; j++) bad += pd[j * 3 + i] != ref[i * 4 + j];
    CHECK(bad == 0, "dequantize of transposed per-row tensor: %d wrong", bad);
    fl_tensor *v = NULL;
    int64_t flat[1] = { 12 };
    CHECK(fl_tensor_view(&v, q, 1, flat) == FL_EINVAL && strstr(fl_last_error(), "dequantize"), "%s", fl_last_error());
    int64_t s3[3] = { 3, 2, 2 };
    REQUIRE_OK(fl_tensor_view(&v, q, 3, s3));
    CHECK(v->scale_axis == 0, "split view keeps axis 0");
    fl_tensor_release(v);
    fl_tensor *row;
    REQUIRE_OK(fl_tensor_select(&row, q, 0, 2));
    CHECK(row->scale_axis == -1 && fl_tensor_numel(row->scale_inv) == 1, "a row is per-tensor");
    float rv[4];
    REQUIRE_OK(fl_tensor_read_f32(row, rv));
    CHECK(memcmp(rv, ref + 8, sizeof rv) == 0, "selected row values");
    fl_tensor_release(row);
    fl_tensor_release(deq); fl_tensor_release(qt); fl_tensor_release(q); fl_tensor_release(t);
}

TEST(rng_philox_known_answer) {
    /* Random123 kat_vectors: philox4x32_10, counter 0, key 0. */
    uint32_t w[4];
    fl_philox4x32(0, 0, w);
    CHECK(w[0] == 0x6627e8d5u && w[1] == 0xe169c58du && w[2] == 0xbc57ac4cu && w[3] == 0x9b00dbd8u,
          "got %08x %08x %08x %08x", w[0], w[1], w[2], w[3]);
}

TEST(rng_uniform_normal_deterministic) {
    enum { N = 100003 };
    float *a = malloc(N * 4), *b = malloc(N * 4);
    fl_rng r;
    fl_rng_seed(&r, 42);
    fl_rng_uniform(&r, a, N, 0, 1);
    CHECK(r.counter == (N + 3) / 4, "counter advanced by blocks: %llu", (unsigned long long)r.counter);
    fl_rng_seed(&r, 42);
    fl_rng_uniform(&r, b, N, 0, 1);
    CHECK(memcmp(a, b, N * 4) == 0, "same seed, same numbers");
    double s = 0;
    int out = 0;
    for (int i = 0; i < N; i++) { s += a[i]; out += a[i] < 0 || a[i] >= 1; }
    CHECK(out == 0 && fabs(s / N - 0.5) < 0.01, "uniform mean %g, %d out of range", s / N, out);
    fl_manual_seed(7);
    fl_rng_normal(fl_default_rng(), a, N, 0, 1);
    double m = 0, v = 0;
    for (int i = 0; i < N; i++) m += a[i];
    m /= N;
    for (int i = 0; i < N; i++) v += (a[i] - m) * (a[i] - m);
    v /= N;
    CHECK(fabs(m) < 0.02 && fabs(v - 1) < 0.03, "normal mean %g var %g", m, v);
    fl_manual_seed(7);
    fl_tensor *t;
    int64_t sh[1] = { N };
    REQUIRE_OK(fl_randn(&t, NULL, 1, sh, FL_F32));
    CHECK(memcmp(fl_tensor_data(t), a, N * 4) == 0, "randn uses the default generator");
    fl_tensor_release(t);
    free(a); free(b);
}

TEST(device_registry) {
    CHECK(fl_device_get(FL_DEV_CPU) == fl_cpu_device(), "cpu always there");
    CHECK(strcmp(fl_device_name(FL_DEV_CUDA), "cuda") == 0, "name");
    CHECK(fl_device_get(7) == NULL, "unknown id");
}

/* Underflow counts every nonzero source value whose code is ±0, whatever the scale axis, also when x times
 * its scale is already 0 in fp32 (per-column scales take their own CPU path; the GPU counted these and the
 * CPU did not, found on the first H100 run). */
TEST(tensor_fp8_underflow_counts_products_lost_in_fp32) {
    /* column 0: amax 1e30 (scale 448e-30) beside 1e-20 (product ~4e-48: 0 in fp32); column 1: ordinary */
    float src[6] = { 1e30f, 1.0f, 1e-20f, 0.5f, 0.0f, 1e-9f };
    int64_t s[2] = { 3, 2 };
    for (int axis = -1; axis <= 1; axis++) {
        fl_tensor *t, *q;
        REQUIRE_OK(fl_tensor_from_f32(&t, src, 2, s, FL_F32));
        fl_quant_opts o;
        fl_quant_opts_default(&o);
        o.axis = axis;
        REQUIRE_OK(fl_quantize(&q, t, FL_E4M3, &o));
        const uint8_t *b = fl_tensor_data(q);
        int64_t want = 0;
        for (int i = 0; i < 6; i++) want += src[i] != 0.0f && (b[i] & 0x7f) == 0;
        fl_cast_stats st;
        REQUIRE_OK(fl_tensor_qstats(q, &st));
        CHECK(want >= 1 && st.underflow == want, "axis %d: underflow %lld, %lld nonzero values have code 0", axis,
              (long long)st.underflow, (long long)want);
        fl_tensor_release(q); fl_tensor_release(t);
    }
}

/* fl_tensor_copy_like (stop 103's, from autograd's and to_preserving's copies): a dense t that is not contiguous
 * keeps its strides, converted in memory order; any other t (a narrow: not dense) gives a contiguous copy, as its
 * header says ("t's values in a new tensor"; until stop 104 it failed there: 'flat: ... not dense'); an FP8 t or dt
 * is refused (its scale would not follow a flat walk). Values checked element by element against t's. */
TEST(tensor_copy_like_any_layout_and_refuses_fp8) {
    const int64_t sh[3] = { 3, 4, 5 };
    fl_tensor *t = seq(3, sh), *tr = NULL, *nw = NULL, *c = NULL;
    REQUIRE_OK(fl_tensor_transpose(&tr, t, 0, 2));   /* [5, 4, 3], dense, not contiguous */
    REQUIRE_OK(fl_tensor_narrow(&nw, tr, 1, 1, 2));  /* [5, 2, 3], not dense */
    const fl_tensor *ins[2] = { tr, nw };
    for (int k = 0; k < 2; k++) {
        for (int d = 0; d < 2; d++) {
            const fl_dtype dt = d ? FL_BF16 : FL_F32;
            fl_status st = fl_tensor_copy_like(&c, ins[k], dt);
            CHECK(st == FL_OK && c, "%s -> %s: %s", k ? "narrow" : "transpose", d ? "bf16" : "fp32", fl_last_error());
            if (st != FL_OK) continue;
            CHECK(c->dtype == dt && fl_shape_equal(c->ndim, c->shape, ins[k]->ndim, ins[k]->shape), "dtype and shape");
            if (k == 0) CHECK(memcmp(c->stride, tr->stride, sizeof(int64_t) * 3) == 0, "the dense t's strides kept");
            else CHECK(fl_tensor_is_contiguous(c), "a contiguous copy of a t that is not dense");
            int bad = 0;
            for (int64_t i = 0; i < ins[k]->shape[0]; i++)
                for (int64_t j = 0; j < ins[k]->shape[1]; j++)
                    for (int64_t l = 0; l < ins[k]->shape[2]; l++) bad += at(c, i, j, l) != at(ins[k], i, j, l);
            CHECK(bad == 0, "%d values differ", bad);   /* (0..59 are exact in bf16) */
            fl_tensor_release(c);
            c = NULL;
        }
    }
    fl_status st = fl_tensor_copy_like(&c, tr, FL_E4M3);
    CHECK(st == FL_EINVAL && c == NULL, "an FP8 dt refused: %d", (int)st);
    fl_tensor_release(c);
    c = NULL;
    fl_tensor *q = NULL;
    fl_quant_opts qo;
    fl_quant_opts_default(&qo);
    REQUIRE_OK(fl_quantize(&q, t, FL_E4M3, &qo));
    st = fl_tensor_copy_like(&c, q, FL_F32);
    CHECK(st == FL_EINVAL && c == NULL, "an FP8 t refused: %d", (int)st);
    fl_tensor_release(c);
    fl_tensor_release(q);
    fl_tensor_release(nw);
    fl_tensor_release(tr);
    fl_tensor_release(t);
}
