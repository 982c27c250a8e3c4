/* bench_passes.c — the CPU device's passes over a layer's activations that a te GPT step makes besides its GEMMs,
 * one call each, fastest and median of R: the FP8 cast alone (quantize, per tensor), GELU with the next layer's
 * input cast (quantize_gelu), dY's cast with the bias gradient (quantize_dbias), GELU's backward with dY's cast
 * and the bias gradient (quantize_dbias_dgelu), LayerNorm with the next cast (layernorm_quantize, rows of C),
 * LayerNorm's backward (layernorm_bwd: dx, and dw and db added to),
 * the bias gradient alone (the column sum, reduce), and a memcpy of the fp32 source for scale; then the passes of
 * current scaling (an ao step's): the amax alone (amax), the cast with its amax (quantize_current), the fused casts
 * with scale NULL (quantize_gelu_current, quantize_dbias_current, quantize_dbias_dgelu_current), GELU and its
 * backward alone (gelu, gelu_bwd: what runs where no cast is fused), and LayerNorm with the next cast
 * (layernorm_quantize_current); then ao rowwise's: the per-row cast with the column amaxes and the bias gradient in
 * its read (quantize_rows_aux), and the per-column cast (quantize_cols, the scales given).
 * Usage: bench_passes [ROWS COLS R [MODE]] (default 2048 1024 30); threads from OMP_NUM_THREADS. MODE: cold (one
 * store into each line of a 64 MiB buffer before each timed call, bench_util.h, so the operands come from memory
 * as in a step). FP8LAB_CPU_ISA caps the instruction sets as it does fp8lab's (docs/cli.md).
 * Prints one line per pass:
 *   pass name=quantize_dbias_dgelu rows=2048 cols=1024 threads=2 cache=cold ms=... med_ms=... */
#include "device.h"
#include "error.h"
#include "ops_raw.h"
#include "tensor.h"
#include "bench_util.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fl_tensor *f32(int64_t ndim, const int64_t *shape, float amp, uint64_t seed) {
    fl_tensor *t = NULL;
    if (fl_tensor_empty(&t, FL_F32, (int)ndim, shape, 0) != FL_OK) {
        fprintf(stderr, "bench_passes: %s\n", fl_last_error());
        exit(1);
    }
    bench_fill(fl_tensor_data(t), fl_tensor_numel(t), amp, seed);
    return t;
}

static void check(fl_status st, const char *what) {
    if (st != FL_OK) {
        fprintf(stderr, "bench_passes: %s: %s\n", what, fl_last_error());
        exit(1);
    }
}

int main(int argc, char **argv) {
    const int64_t R = argc > 1 ? atoll(argv[1]) : 2048, C = argc > 2 ? atoll(argv[2]) : 1024;
    const int reps = argc > 3 ? atoi(argv[3]) : 30;
    if (R < 1 || C < 1 || reps < 1) {
        fprintf(stderr, "bench_passes: ROWS, COLS and R must be at least 1\n");
        return 2;
    }
    static const char *const modes[] = { "cold" };
    const int cold = argc > 4 ? (int)bench_mode("bench_passes", argv[4], modes, 1) : 0;
    bench_cpu_isa("bench_passes");
    const fl_device *dev = fl_device_get(0);
    const int64_t shape[2] = { R, C };
    fl_tensor *x = f32(2, shape, 3.0f, 0x9E3779B97F4A7C15ull), *dy = f32(2, shape, 1e-3f, 0x2545F4914F6CDD1Dull);
    fl_tensor *w = f32(1, &C, 1.0f, 7), *b = f32(1, &C, 0.1f, 11), *copy = f32(2, shape, 0.0f, 13);
    fl_tensor *q = NULL, *db = NULL, *mean = NULL, *rstd = NULL, *sum = NULL;
    check(fl_tensor_empty(&q, FL_E4M3, 2, shape, 0), "alloc");
    check(fl_tensor_empty(&db, FL_F32, 1, &C, 0), "alloc");
    check(fl_tensor_empty(&mean, FL_F32, 1, &R, 0), "alloc");
    check(fl_tensor_empty(&rstd, FL_F32, 1, &R, 0), "alloc");
    const float scale = 64.0f, gscale = 4096.0f;
    fl_tensor *dx = f32(2, shape, 0.0f, 23), *dw = f32(1, &C, 0.0f, 29), *dbn = f32(1, &C, 0.0f, 31);
    check(dev->layernorm_fwd(fl_tensor_data(x), fl_tensor_data(w), fl_tensor_data(b), fl_tensor_data(copy),
                             fl_tensor_data(mean), fl_tensor_data(rstd), R, C, 1e-5f), "layernorm_fwd");
    fl_tensor *qr = NULL, *qc = NULL, *rs = NULL, *cs = NULL;   /* per-row and per-column FP8, their scales */
    check(fl_tensor_empty(&qr, FL_E4M3, 2, shape, 0), "alloc");
    check(fl_tensor_empty(&qc, FL_E4M3, 2, shape, 0), "alloc");
    check(fl_tensor_empty(&rs, FL_F32, 1, &R, 0), "alloc");
    check(fl_tensor_empty(&cs, FL_F32, 1, &C, 0), "alloc");
    fl_tensor_release(qr->scale_inv); qr->scale_inv = rs; qr->scale_axis = 0;
    fl_tensor_release(qc->scale_inv); qc->scale_inv = cs; qc->scale_axis = 1;
    float *cmax = malloc((size_t)C * sizeof(float)), *cscale = malloc((size_t)C * sizeof(float));
    if (!cmax || !cscale) return 1;
    for (int64_t c = 0; c < C; c++) cscale[c] = 64.0f;
    enum { NPASS = 18 };
    static const char *const names[NPASS] = { "quantize", "quantize_gelu", "quantize_dbias", "quantize_dbias_dgelu",
                                              "layernorm_quantize", "reduce_bias", "memcpy", "layernorm_bwd", "amax",
                                              "quantize_current", "quantize_gelu_current", "quantize_dbias_current",
                                              "quantize_dbias_dgelu_current", "gelu", "gelu_bwd",
                                              "layernorm_quantize_current", "quantize_rows_aux", "quantize_cols" };
    float amax = 0.0f;
    double *ts = malloc((size_t)reps * sizeof(double));
    if (!ts) return 1;
    for (int p = 0; p < NPASS; p++) {
        double best = INFINITY;
        for (int r = 0; r < reps; r++) {
            if (cold) bench_evict();
            const double t0 = bench_now();
            switch (p) {
            case 0: check(dev->quantize(q, x, &scale, -1, FL_SATURATE), names[p]); break;
            case 1: check(dev->quantize_gelu(q, x, &scale, 0, false, 1, FL_SATURATE), names[p]); break;
            case 2: check(dev->quantize_dbias(q, dy, &gscale, 0, false, FL_SATURATE, db), names[p]); break;
            case 3: check(dev->quantize_dbias_dgelu(q, dy, x, &gscale, 0, false, FL_SATURATE, db), names[p]); break;
            case 4: check(dev->layernorm_quantize(q, x, w, b, mean, rstd, 1e-5f, &scale, 0, false, FL_SATURATE), names[p]);
                break;
            case 5: check(fl_reduce_raw(&sum, FL_OP_SUM, dy, 0, false), names[p]); break;
            case 6: memcpy(fl_tensor_data(copy), fl_tensor_data(x), (size_t)(R * C) * sizeof(float)); break;
            case 7:
                check(dev->layernorm_bwd(fl_tensor_data(x), fl_tensor_data(w), fl_tensor_data(mean),
                                         fl_tensor_data(rstd), fl_tensor_data(dy), fl_tensor_data(dx),
                                         fl_tensor_data(dw), fl_tensor_data(dbn), R, C), names[p]);
                break;
            case 8: check(dev->amax(x, -1, &amax), names[p]); break;
            case 9: check(dev->quantize_current(q, x, -1, 0, false, FL_SATURATE), names[p]); break;
            case 10: check(dev->quantize_gelu(q, x, NULL, 0, false, 1, FL_SATURATE), names[p]); break;
            case 11: check(dev->quantize_dbias(q, dy, NULL, 0, false, FL_SATURATE, db), names[p]); break;
            case 12: check(dev->quantize_dbias_dgelu(q, dy, x, NULL, 0, false, FL_SATURATE, db), names[p]); break;
            case 13: check(dev->act_fwd(FL_ACT_GELU_TANH, fl_tensor_data(x), fl_tensor_data(dx), R * C), names[p]); break;
            case 15:
                check(dev->layernorm_quantize(q, x, w, b, mean, rstd, 1e-5f, NULL, 0, false, FL_SATURATE), names[p]);
                break;
            case 16: check(dev->quantize_rows_aux(qr, x, 0, true, FL_SATURATE, cmax, db), names[p]); break;
            case 17: check(dev->quantize(qc, x, cscale, 1, FL_SATURATE), names[p]); break;
            default:
                check(dev->act_bwd(FL_ACT_GELU_TANH, fl_tensor_data(x), fl_tensor_data(dy), fl_tensor_data(dx), R * C),
                      names[p]);
                break;
            }
            ts[r] = bench_now() - t0;
            if (ts[r] < best) best = ts[r];
            fl_tensor_release(sum);
            sum = NULL;
        }
        printf("pass name=%s rows=%lld cols=%lld threads=%d cache=%s ms=%.3f med_ms=%.3f\n", names[p], (long long)R,
               (long long)C, omp_get_max_threads(), cold ? "cold" : "warm", best * 1e3, bench_median(ts, reps) * 1e3);
    }
    free(ts);
    free(cmax);
    free(cscale);
    fl_tensor *all[] = { x, dy, w, b, copy, q, db, mean, rstd, dx, dw, dbn, qr, qc };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fl_tensor_release(all[i]);
    return 0;
}
