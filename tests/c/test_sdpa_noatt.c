/* test_sdpa_noatt.c — the CPU device's attention forward without probabilities (att NULL: what core/nn.c asks when
 * no backward will run) gives the bits of the forward that writes them: the fp32 per-head kernels keeping each tile's
 * P in their buffer (8- and 16-lane products), and the paths that write P to a temporary (the bf16 maths, the batched
 * GEMMs, the per-row loops), causal or not, T on and off the tiles' multiples. */
#include "runner.h"
#include "cpu/cpu_internal.h"
#include "cpu/cpu_nn.h"
#include "cpu/cpu_nn_internal.h"
#include <stdint.h>
#include <stdlib.h>

static uint64_t na_state = 0x2545F4914F6CDD1Dull;
static float na_rand(void) {   /* xorshift64, uniform in [-2, 2) */
    na_state ^= na_state << 13; na_state ^= na_state >> 7; na_state ^= na_state << 17;
    return (float)((double)(na_state >> 11) / 9007199254740992.0 * 4.0 - 2.0);
}

static void check_shape(int *fl__failed, int64_t B, int64_t H, int64_t T, int64_t D, const char *path) {
    const int64_t n = B * H * T * D;
    float *q = malloc(sizeof(float) * n), *k = malloc(sizeof(float) * n), *v = malloc(sizeof(float) * n);
    float *o1 = malloc(sizeof(float) * n), *o2 = malloc(sizeof(float) * n);
    float *att = malloc(sizeof(float) * B * H * T * T);
    for (int64_t i = 0; i < n; i++) { q[i] = na_rand(); k[i] = na_rand(); v[i] = na_rand(); }
    for (int causal = 0; causal < 2; causal++)
        for (int bf = 0; bf < 2; bf++) {
            const float scale = 1.0f / sqrtf((float)D);
            CHECK_OK(fl_cpu_dev_sdpa_fwd(q, k, v, o1, att, B, H, T, D, scale, causal, bf));
            CHECK_OK(fl_cpu_dev_sdpa_fwd(q, k, v, o2, NULL, B, H, T, D, scale, causal, bf));
            CHECK(!memcmp(o1, o2, sizeof(float) * n), "%s [%lld, %lld, %lld, %lld] causal %d bf16 %d: without P the "
                  "output differs", path, (long long)B, (long long)H, (long long)T, (long long)D, causal, bf);
        }
    free(q); free(k); free(v); free(o1); free(o2); free(att);
}

TEST(sdpa_fwd_without_probabilities_same_bits) {
    const int64_t shapes[][4] = { { 2, 3, 128, 32 }, { 1, 2, 37, 16 }, { 2, 1, 1, 8 }, { 1, 2, 130, 24 } };
    for (int p = 0; p < 4; p++) {   /* per-head 16 lanes, per-head 8 lanes, batched GEMMs, per-row loops */
        fl_cpu_attn_fma512_allowed = p == 0;
        fl_cpu_attn_f32_allowed = p <= 1;
        fl_cpu_sdpa_gemm_allowed = p <= 2;
        const char *path = p == 0 ? "per-head (16 lanes)" : p == 1 ? "per-head (8 lanes)" : p == 2 ? "batched GEMMs"
                                                                                                     : "row loops";
        for (int s = 0; s < 4; s++) check_shape(fl__failed, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], path);
    }
    fl_cpu_attn_fma512_allowed = fl_cpu_attn_f32_allowed = fl_cpu_sdpa_gemm_allowed = true;
}

/* The packed entry (qkv [B, T, 3·H·D], as F.qkv_attention calls it) with att and stats both NULL (no backward: what
 * core/nn.c asks under no_grad) against the same entry keeping P, fp32 and bf16, causal or not. */
TEST(sdpa_qkv_fwd_without_probabilities_same_bits) {
    const int64_t shapes[][4] = { { 2, 3, 128, 32 }, { 1, 2, 37, 16 }, { 2, 4, 130, 8 } };
    for (int s = 0; s < 3; s++) {
        const int64_t B = shapes[s][0], H = shapes[s][1], T = shapes[s][2], D = shapes[s][3], C = H * D;
        float *qkv = malloc(sizeof(float) * B * T * 3 * C), *o1 = malloc(sizeof(float) * B * T * C);
        float *o2 = malloc(sizeof(float) * B * T * C), *att = malloc(sizeof(float) * B * H * T * T);
        for (int64_t i = 0; i < B * T * 3 * C; i++) qkv[i] = na_rand();
        for (int causal = 0; causal < 2; causal++)
            for (int bf = 0; bf < 2; bf++) {
                bool d1 = false, d2 = false;
                const float scale = 1.0f / sqrtf((float)D);
                CHECK_OK(fl_cpu_dev_sdpa_qkv_fwd(qkv, o1, att, NULL, B, H, T, D, scale, causal, bf, &d1));
                CHECK_OK(fl_cpu_dev_sdpa_qkv_fwd(qkv, o2, NULL, NULL, B, H, T, D, scale, causal, bf, &d2));
                CHECK(d1 == d2, "[%lld, %lld, %lld, %lld]: taken with P %d, without %d", (long long)B, (long long)H,
                      (long long)T, (long long)D, d1, d2);
                if (d1 && d2)
                    CHECK(!memcmp(o1, o2, sizeof(float) * B * T * C), "[%lld, %lld, %lld, %lld] causal %d bf16 %d: "
                          "without P the output differs", (long long)B, (long long)H, (long long)T, (long long)D, causal, bf);
            }
        free(qkv); free(o1); free(o2); free(att);
    }
}
