/* bench_chnorm_dnnl.c — BatchNorm training (forward, then backward with scale and shift) of an NHWC fp32 x
 * [16, 64, 32, 32]: oneDNN 2.6's batch_normalization primitives against fp8lab's own NHWC kernels
 * (core/cpu/cpu_nn_chnorm_cl.c) and its NCHW ones on the same values; the fastest of REPS calls after a warm-up, by
 * process CPU time (run with OMP_NUM_THREADS=1), and the largest difference of y and dx from the NCHW kernels'.
 * docs/performance.md "channels_last through norms and pooling (stop 104)". Build (after make):
 *   cc -O2 -std=c11 -D_GNU_SOURCE -fopenmp -march=x86-64-v3 -Icore scripts/bench_chnorm_dnnl.c \
 *      build/core/cpu/cpu_nn_chnorm_cl.o build/core/cpu/cpu_nn_chnorm.o build/core/error.o -ldnnl -lm \
 *      -o build/bench_chnorm_dnnl && OMP_NUM_THREADS=1 build/bench_chnorm_dnnl 20 */
#include "cpu/cpu_nn.h"
#include "cpu/cpu_internal.h"

#include <dnnl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N 16
#define C 64
#define H 32
#define W 32
#define P (H * W)
#define NUM ((size_t)N * C * P)

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

#define CK(e) do { dnnl_status_t s_ = (e); if (s_ != dnnl_success) { fprintf(stderr, "%s: %d\n", #e, (int)s_); exit(1); } } while (0)

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 10;
    if (reps < 1) { fprintf(stderr, "REPS must be >= 1\n"); return 2; }
    float *x = malloc(NUM * 4), *dy = malloc(NUM * 4), *y = malloc(NUM * 4), *dx = malloc(NUM * 4);
    float *xc = malloc(NUM * 4), *dyc = malloc(NUM * 4), *yc = malloc(NUM * 4), *dxc = malloc(NUM * 4);
    float w[C], b[C], mean[C], rstd[C], var[C], dw[C], db[C], ss[2 * C], dss[2 * C];
    unsigned r = 12345;
    for (size_t i = 0; i < NUM; i++) {   /* NHWC x, dy; xc, dyc the same values [N, C, P] */
        r = r * 1103515245u + 12345u; x[i] = ((r >> 8) & 0xffff) / 32768.0f - 1.0f + 0.5f;
        r = r * 1103515245u + 12345u; dy[i] = ((r >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    for (int n = 0; n < N; n++)
        for (int p = 0; p < P; p++)
            for (int c = 0; c < C; c++) {
                xc[((size_t)n * C + c) * P + p] = x[((size_t)n * P + p) * C + c];
                dyc[((size_t)n * C + c) * P + p] = dy[((size_t)n * P + p) * C + c];
            }
    for (int c = 0; c < C; c++) w[c] = 0.5f + c / 64.0f, b[c] = c / 128.0f, ss[c] = w[c], ss[C + c] = b[c];

    double best[3] = { 1e30, 1e30, 1e30 };
    for (int k = 0; k <= reps; k++) {
        double t0 = cpu_ms();
        fl_cpu_chnorm_fwd(xc, w, b, yc, mean, rstd, var, N, C, P, 0, 1e-5f);
        for (int c = 0; c < C; c++) dw[c] = db[c] = 0;
        fl_cpu_chnorm_bwd(xc, w, mean, rstd, dyc, dxc, dw, db, N, C, P, 0);
        double t1 = cpu_ms();
        fl_cpu_dev_chnorm_fwd_cl(x, w, b, y, mean, rstd, var, N, C, P, 0, 1e-5f);
        for (int c = 0; c < C; c++) dw[c] = db[c] = 0;
        fl_cpu_dev_chnorm_bwd_cl(x, w, mean, rstd, dy, dx, dw, db, N, C, P, 0);
        double t2 = cpu_ms();
        if (k) { if (t1 - t0 < best[0]) best[0] = t1 - t0; if (t2 - t1 < best[1]) best[1] = t2 - t1; }
    }
    double dmax = 0, dxmax = 0;
    for (int n = 0; n < N; n++)
        for (int p = 0; p < P; p++)
            for (int c = 0; c < C; c++) {
                double e = fabs(y[((size_t)n * P + p) * C + c] - yc[((size_t)n * C + c) * P + p]);
                double f = fabs(dx[((size_t)n * P + p) * C + c] - dxc[((size_t)n * C + c) * P + p]);
                if (e > dmax) dmax = e;
                if (f > dxmax) dxmax = f;
            }

    /* oneDNN: nhwc data, scale and shift, forward training (mean, variance out), backward (diff scale and shift) */
    dnnl_engine_t eng;
    dnnl_stream_t str;
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&str, eng, dnnl_stream_default_flags));
    const dnnl_dims_t dims = { N, C, H, W };
    dnnl_memory_desc_t md;
    CK(dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_f32, dnnl_nhwc));
    const unsigned flags = dnnl_use_scaleshift;
    dnnl_batch_normalization_desc_t fd, bd;
    dnnl_primitive_desc_t fpd, bpd;
    CK(dnnl_batch_normalization_forward_desc_init(&fd, dnnl_forward_training, &md, 1e-5f, flags));
    CK(dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL));
    CK(dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &md, &md, 1e-5f, flags));
    CK(dnnl_primitive_desc_create(&bpd, &bd, NULL, eng, fpd));
    dnnl_primitive_t fp, bp;
    CK(dnnl_primitive_create(&fp, fpd));
    CK(dnnl_primitive_create(&bp, bpd));
    const dnnl_memory_desc_t *ssmd = dnnl_primitive_desc_query_md(fpd, dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t *mmd = dnnl_primitive_desc_query_md(fpd, dnnl_query_dst_md, 1);
    const dnnl_memory_desc_t *wsmd = dnnl_primitive_desc_query_md(fpd, dnnl_query_workspace_md, 0);
    float *yd = malloc(NUM * 4), *dxd = malloc(NUM * 4), md_[C], vd[C];
    dnnl_memory_t mx, my, mss, mm, mv, mdy, mdx, mdss, mws = NULL;
    CK(dnnl_memory_create(&mx, &md, eng, x));
    CK(dnnl_memory_create(&my, &md, eng, yd));
    CK(dnnl_memory_create(&mss, ssmd, eng, ss));
    CK(dnnl_memory_create(&mm, mmd, eng, md_));
    CK(dnnl_memory_create(&mv, mmd, eng, vd));
    CK(dnnl_memory_create(&mdy, &md, eng, dy));
    CK(dnnl_memory_create(&mdx, &md, eng, dxd));
    CK(dnnl_memory_create(&mdss, ssmd, eng, dss));
    if (wsmd && dnnl_memory_desc_get_size(wsmd)) CK(dnnl_memory_create(&mws, wsmd, eng, DNNL_MEMORY_ALLOCATE));
    dnnl_exec_arg_t fa[] = { { DNNL_ARG_SRC, mx }, { DNNL_ARG_DST, my }, { DNNL_ARG_SCALE_SHIFT, mss },
                             { DNNL_ARG_MEAN, mm }, { DNNL_ARG_VARIANCE, mv }, { DNNL_ARG_WORKSPACE, mws } };
    dnnl_exec_arg_t ba[] = { { DNNL_ARG_SRC, mx }, { DNNL_ARG_DIFF_DST, mdy }, { DNNL_ARG_SCALE_SHIFT, mss },
                             { DNNL_ARG_MEAN, mm }, { DNNL_ARG_VARIANCE, mv }, { DNNL_ARG_DIFF_SRC, mdx },
                             { DNNL_ARG_DIFF_SCALE_SHIFT, mdss }, { DNNL_ARG_WORKSPACE, mws } };
    for (int k = 0; k <= reps; k++) {
        double t0 = cpu_ms();
        CK(dnnl_primitive_execute(fp, str, mws ? 6 : 5, fa));
        CK(dnnl_primitive_execute(bp, str, mws ? 8 : 7, ba));
        CK(dnnl_stream_wait(str));
        double t1 = cpu_ms();
        if (k && t1 - t0 < best[2]) best[2] = t1 - t0;
    }
    double emax = 0, exmax = 0;
    for (size_t i = 0; i < NUM; i++) {
        if (fabs(yd[i] - y[i]) > emax) emax = fabs(yd[i] - y[i]);
        if (fabs(dxd[i] - dx[i]) > exmax) exmax = fabs(dxd[i] - dx[i]);
    }
    printf("batch_norm fwd+bwd [%d, %d, %d, %d] fp32, best of %d, CPU ms: NCHW kernels %.3f, NHWC kernels %.3f, "
           "oneDNN nhwc %.3f\n", N, C, H, W, reps, best[0], best[1], best[2]);
    printf("max |NHWC - NCHW|: y %.3g, dx %.3g; max |oneDNN - NHWC|: y %.3g, dx %.3g\n", dmax, dxmax, emax, exmax);
    return 0;
}
