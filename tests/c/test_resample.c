/* test_resample.c — core/resample.c against a loop written here in fp32 steps: each output the products of its
 * taps rounded and added left to right (the bits the Lua composite gave); an interrupt stopping it; bad positions
 * and weights refused. */
#include "runner.h"
#include "ops.h"
#include "tensor.h"
#include "error.h"
#include <math.h>
#include <stdlib.h>

TEST(resample_matches_the_loop_and_stops_on_interrupt) {
    const int64_t s[3] = { 3, 5, 7 };
    const int64_t m = 4;
    const int taps = 4;
    fl_tensor *x = NULL, *y = NULL;
    REQUIRE_OK(fl_tensor_empty(&x, FL_F32, 3, s, FL_DEV_CPU));
    float *xv = fl_tensor_data(x);
    for (int i = 0; i < 105; i++) xv[i] = (float)((i * 37 % 23) - 11) / 7.0f;
    int64_t pos[16];
    float w[16];
    for (int k = 0; k < 16; k++) pos[k] = (k * 3 + 1) % 5, w[k] = (float)((k % 5) - 1.7) / 3.0f;
    REQUIRE_OK(fl_resample(&y, x, 1, m, taps, pos, w));
    CHECK(y->shape[0] == 3 && y->shape[1] == 4 && y->shape[2] == 7, "shape");
    const float *yv = fl_tensor_data(y);
    int bad = 0;
    for (int o = 0; o < 3; o++)
        for (int j = 0; j < m; j++)
            for (int i = 0; i < 7; i++) {
                float acc = xv[(o * 5 + pos[j * taps]) * 7 + i] * w[j * taps];
                for (int t = 1; t < taps; t++) {
                    const float p = xv[(o * 5 + pos[j * taps + t]) * 7 + i] * w[j * taps + t];
                    acc = acc + p;
                }
                bad += yv[(o * m + j) * 7 + i] != acc;
            }
    CHECK(bad == 0, "%d outputs differ from the loop's bits", bad);
    fl_tensor_release(y);
    y = NULL;

    fl_interrupt_set();
    CHECK(fl_resample(&y, x, 1, m, taps, pos, w) == FL_EINTR && y == NULL, "not interrupted");
    fl_interrupt_clear();

    pos[5] = 5;
    CHECK(fl_resample(&y, x, 1, m, taps, pos, w) == FL_EINVAL && y == NULL, "position 5 of 5 taken");
    pos[5] = 0;
    w[2] = NAN;
    CHECK(fl_resample(&y, x, 1, m, taps, pos, w) == FL_EINVAL && y == NULL, "a NaN weight taken");
    fl_tensor_release(x);
}
