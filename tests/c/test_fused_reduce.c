/* test_fused_reduce.c — stop 95's one-pass reductions, fl_sum_squares and fl_logsumexp (core/ops.h), against the ops
 * they replaced (fl_reduce's sum of fl_binary's a·a; max, a − m, exp, sum, log, + m), bit for bit, on the sizes their
 * loops split at (16 lanes, LSE_PIECE, RBLOCK), on 1 and 2 threads, and the arguments they refuse. */
#include "runner.h"
#include "ops.h"
#include "ops_raw.h"
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static fl_tensor *filled(int ndim, const int64_t *shape, uint32_t seed) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = (float)((seed >> 8) * (1.0 / 16777216.0) * 40.0 - 20.0);
    }
    fl_tensor *t = NULL;
    fl_tensor_from_f32(&t, v, ndim, shape, FL_F32);
    free(v);
    return t;
}

static int64_t bits_differ(const fl_tensor *a, const fl_tensor *b) {
    int64_t n = fl_tensor_numel(a);
    if (n != fl_tensor_numel(b)) return -1;
    float *x = malloc((size_t)(n ? n : 1) * 4), *y = malloc((size_t)(n ? n : 1) * 4);
    fl_tensor_read_f32(a, x);
    fl_tensor_read_f32(b, y);
    int64_t bad = memcmp(x, y, (size_t)n * 4) != 0;
    free(x); free(y);
    return bad;
}

/* logsumexp's ops one after another, as core/ops.c's logsumexp_ops (a device without the entry) makes them */
static fl_status lse_ops(fl_tensor **out, const fl_tensor *a, int dim) {
    fl_tensor *m = NULL, *d = NULL, *e = NULL, *s = NULL;
    fl_status st = fl_reduce_raw(&m, FL_OP_MAX, a, dim, true);
    if (st == FL_OK) {
        float *mp = fl_tensor_data(m);
        for (int64_t i = 0; i < fl_tensor_numel(m); i++) if (isinf(mp[i])) mp[i] = 0.0f;
        st = fl_binary_raw(&d, FL_OP_SUB, a, m);
    }
    if (st == FL_OK) st = fl_unary_raw(&e, FL_OP_EXP, d);
    if (st == FL_OK) st = fl_reduce_raw(&s, FL_OP_SUM, e, dim, true);
    fl_tensor *l = NULL;
    if (st == FL_OK) st = fl_unary_raw(&l, FL_OP_LOG, s);
    if (st == FL_OK) st = fl_binary_raw(out, FL_OP_ADD, l, m);
    fl_tensor_release(m); fl_tensor_release(d); fl_tensor_release(e); fl_tensor_release(s); fl_tensor_release(l);
    return st;
}

/* Row lengths around the 16 lanes, LSE_PIECE (1024) and one above RBLOCK (65536); both dims of a 2-d tensor (stride 1
 * and not); 1 and 2 threads give the bits of the ops they replaced. */
TEST(fused_reduce_bits_of_the_ops_any_threads) {
    static const int64_t cols[] = { 1, 15, 16, 17, 511, 1023, 1024, 1025, 2049, 65537 };
    const int before = omp_get_max_threads();
    for (size_t ci = 0; ci < sizeof cols / sizeof *cols; ci++) {
        const int64_t shape[2] = { cols[ci] > 4096 ? 3 : 37, cols[ci] };
        fl_tensor *a = filled(2, shape, (uint32_t)ci + 7);
        for (int dim = -1; dim < 2; dim++) {
            const int d = dim < 0 ? FL_ALL_DIMS : dim;
            fl_tensor *sq = NULL, *want = NULL;
            REQUIRE_OK(fl_binary_raw(&sq, FL_OP_MUL, a, a));
            REQUIRE_OK(fl_reduce_raw(&want, FL_OP_SUM, sq, d, false));
            fl_tensor *lwant = NULL;
            if (dim >= 0) REQUIRE_OK(lse_ops(&lwant, a, dim));
            for (int th = 1; th <= 2; th++) {
                omp_set_num_threads(th);
                fl_tensor *got = NULL;
                CHECK_OK(fl_sum_squares(&got, a, d, false));
                CHECK(got && bits_differ(got, want) == 0, "sum_squares of [%lld, %lld] along %d, %d threads: not the "
                      "bits of (a * a):sum()", (long long)shape[0], (long long)shape[1], dim, th);
                fl_tensor_release(got);
                if (dim >= 0) {
                    got = NULL;
                    CHECK_OK(fl_logsumexp(&got, a, dim, true));
                    CHECK(got && bits_differ(got, lwant) == 0, "logsumexp of [%lld, %lld] along %d, %d threads: not "
                          "the bits of its ops", (long long)shape[0], (long long)shape[1], dim, th);
                    fl_tensor_release(got);
                }
            }
            omp_set_num_threads(before);
            fl_tensor_release(sq); fl_tensor_release(want); fl_tensor_release(lwant);
        }
        fl_tensor_release(a);
    }
}

/* logsumexp takes one dim (torch's takes a dim, and core/ops.h's says so): FL_ALL_DIMS, which fl_reduce takes for
 * "all", is refused with a message; before stop 96 it read the shape at index FL_ALL_DIMS (-1000), out of bounds
 * (x:_logsumexp(nil) from Lua). Dims out of range, a 0-d tensor, an empty dim and other dtypes are refused too. */
TEST(fused_reduce_logsumexp_refusals) {
    const int64_t shape[2] = { 3, 4 };
    fl_tensor *a = filled(2, shape, 1), *out = NULL;
    fl_status st = fl_logsumexp(&out, a, FL_ALL_DIMS, false);
    CHECK(st != FL_OK && out == NULL && strstr(fl_last_error(), "logsumexp") && strstr(fl_last_error(), "one dim"),
          "logsumexp over all dims: status %d, %s", (int)st, fl_last_error());
    fl_tensor_release(out); out = NULL;
    st = fl_logsumexp(&out, a, 2, false);
    CHECK(st != FL_OK && strstr(fl_last_error(), "out of range"), "dim 2 of a 2-d tensor: %s", fl_last_error());
    fl_tensor_release(out); out = NULL;
    st = fl_logsumexp(&out, a, -3, false);
    CHECK(st != FL_OK && strstr(fl_last_error(), "out of range"), "dim -3 of a 2-d tensor: %s", fl_last_error());
    fl_tensor_release(out); out = NULL;
    fl_tensor *z = NULL, *b = NULL;
    REQUIRE_OK(fl_tensor_zeros(&z, FL_F32, 0, NULL, FL_DEV_CPU));
    st = fl_logsumexp(&out, z, 0, false);
    CHECK(st != FL_OK && strstr(fl_last_error(), "0-d"), "a 0-d tensor: %s", fl_last_error());
    fl_tensor_release(out); out = NULL;
    REQUIRE_OK(fl_to(&b, a, FL_BF16));
    st = fl_logsumexp(&out, b, 0, false);
    CHECK(st != FL_OK && strstr(fl_last_error(), "fp32"), "a bf16 tensor: %s", fl_last_error());
    fl_tensor_release(out); out = NULL;
    fl_tensor_release(z); fl_tensor_release(b); fl_tensor_release(a);
}
