/* test_add_layernorm.c — fl_add_layer_norm (a residual block's LayerNorm in inference, the sum never in memory:
 * core/cpu/cpu_nn_norm.c's fl_cpu_add_layernorm_fwd) against the add then fl_layer_norm, bit for bit: odd and even
 * row counts, short and long rows, weight and bias or none, the AVX-512 and AVX2 rows, infinities and NaN in the sum. */
#include "runner.h"
#include "nn.h"
#include "ops.h"
#include "cpu/cpu_internal.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t al_state = 0xD1B54A32D192ED03ull;
static float al_rand(void) {   /* xorshift64, uniform in [-4, 4) */
    al_state ^= al_state << 13; al_state ^= al_state >> 7; al_state ^= al_state << 17;
    return (float)((double)(al_state >> 11) / 9007199254740992.0 * 8.0 - 4.0);
}

static void check_case(int *fl__failed, int64_t rows, int64_t cols, bool affine) {
    const int64_t s[2] = { rows, cols }, c1[1] = { cols };
    float *xv = malloc(sizeof(float) * (size_t)(rows * cols)), *rv = malloc(sizeof(float) * (size_t)(rows * cols));
    float *wv = malloc(sizeof(float) * (size_t)cols), *bv = malloc(sizeof(float) * (size_t)cols);
    for (int64_t i = 0; i < rows * cols; i++) { xv[i] = al_rand() * 1e3f; rv[i] = al_rand(); }
    for (int64_t j = 0; j < cols; j++) { wv[j] = al_rand(); bv[j] = al_rand(); }
    if (rows > 2) { xv[cols] = INFINITY; xv[2 * cols + 1] = NAN; rv[2 * cols] = 3e38f; xv[2 * cols] = 3e38f; }
    fl_tensor *x = NULL, *r = NULL, *w = NULL, *b = NULL, *sum = NULL, *ref = NULL, *got = NULL;
    REQUIRE_OK(fl_tensor_from_f32(&x, xv, 2, s, FL_F32));
    REQUIRE_OK(fl_tensor_from_f32(&r, rv, 2, s, FL_F32));
    REQUIRE_OK(fl_tensor_from_f32(&w, wv, 1, c1, FL_F32));
    REQUIRE_OK(fl_tensor_from_f32(&b, bv, 1, c1, FL_F32));
    REQUIRE_OK(fl_binary(&sum, FL_OP_ADD, x, r));
    REQUIRE_OK(fl_layer_norm(&ref, sum, affine ? w : NULL, affine ? b : NULL, 1e-5));
    CHECK_OK(fl_add_layer_norm(&got, x, r, affine ? w : NULL, affine ? b : NULL, 1e-5));
    if (got) {
        const uint32_t *g = fl_tensor_data(got), *e = fl_tensor_data(ref);
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < rows * cols; i++)
            if (g[i] != e[i]) { bad++; if (first < 0) first = i; }
        CHECK(bad == 0, "[%lld, %lld] affine %d: %lld differ from add + layer_norm, first at %lld", (long long)rows,
              (long long)cols, affine, (long long)bad, (long long)first);
    }
    fl_tensor_release(x); fl_tensor_release(r); fl_tensor_release(w); fl_tensor_release(b);
    fl_tensor_release(sum); fl_tensor_release(ref); fl_tensor_release(got);
    free(xv); free(rv); free(wv); free(bv);
}

TEST(add_layer_norm_same_bits_as_add_then_layer_norm) {
    const int64_t shapes[][2] = { { 2048, 256 }, { 37, 100 }, { 1, 33 }, { 5, 1030 } };
    for (int wide = 1; wide >= 0; wide--) {
        fl_cpu_avx512_allowed = wide;
        for (int i = 0; i < 4; i++)
            for (int a = 0; a < 2; a++) check_case(fl__failed, shapes[i][0], shapes[i][1], a);
    }
    fl_cpu_avx512_allowed = true;
}

TEST(add_layer_norm_refuses_grad_and_mismatched_shapes) {
    const int64_t s[2] = { 3, 8 }, s2[2] = { 3, 7 };
    fl_tensor *x = NULL, *r = NULL, *r2 = NULL, *y = NULL;
    REQUIRE_OK(fl_tensor_zeros(&x, FL_F32, 2, s, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_zeros(&r, FL_F32, 2, s, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_zeros(&r2, FL_F32, 2, s2, FL_DEV_CPU));
    CHECK(fl_add_layer_norm(&y, x, r2, NULL, NULL, 1e-5) == FL_EINVAL && !y, "shapes [3, 8] and [3, 7]: not refused");
    r->requires_grad = true;
    CHECK(fl_add_layer_norm(&y, x, r, NULL, NULL, 1e-5) == FL_EINVAL && !y, "r requiring grad: not refused");
    fl_tensor_release(x); fl_tensor_release(r); fl_tensor_release(r2);
}
