/* dist_amax.c — one fused MAX all-reduce of the delayed roles' amaxes (dist_amax.h). */
#include "dist_amax.h"
#include "dist.h"
#include <stdio.h>
#include <string.h>

fl_status fl_fp8_layers_reduce_amax(fl_fp8_layer *const *layers, int n, int *nreduced) {
    if (nreduced) *nreduced = 0;
    int m = 0;
    for (int i = 0; i < n; i++)
        for (int r = 0; r < FL_NROLES; r++) {
            FL_TRY(fl_scaling_flush(&layers[i]->role[r]));
            if (layers[i]->role[r].rule == FL_SCALE_DELAYED) m++;
        }
    if (fl_dist_size() <= 1 || m == 0) return FL_OK;
    /* 256 amaxes an all-reduce from the stack (the same count on every process: the same layers): nothing allocated
     * before a collective (until stop 104 a malloc whose failure returned before it left the others waiting there) */
    float buf[256];
    int k = 0, base = 0;
    while (base < m) {
        const int cnt = m - base < 256 ? m - base : 256;
        k = 0;
        for (int i = 0; i < n; i++)
            for (int r = 0; r < FL_NROLES; r++)
                if (layers[i]->role[r].rule == FL_SCALE_DELAYED) {
                    if (k >= base && k < base + cnt) buf[k - base] = layers[i]->role[r].history[0];
                    k++;
                }
        fl_status st = fl_dist_allreduce(buf, cnt, FL_F32, FL_RED_MAX);
        /* (a pairing that MPI refused, "did not pair": a step one process skipped, the script's error, which every
         * process meets: raised with the Accelerator's hint, as before) */
        if (st != FL_OK && strstr(fl_last_error_detail(), "did not pair")) return st;
        if (st != FL_OK) {
            /* one process's all-reduce failed (it may have sent part of its messages): its scales would differ from
             * the others', or its next collective meet theirs; the job ends, naming it */
            char msg[640];
            snprintf(msg, sizeof msg, "rank %d: the MAX all-reduce of the delayed-scaling amaxes failed (%s); the "
                     "processes' scales and collectives can no longer agree, so the job ends", fl_dist_rank(),
                     fl_last_error_detail());
            fl_dist_abort(msg);
        }
        k = 0;
        for (int i = 0; i < n; i++)
            for (int r = 0; r < FL_NROLES; r++)
                if (layers[i]->role[r].rule == FL_SCALE_DELAYED) {
                    if (k >= base && k < base + cnt) layers[i]->role[r].history[0] = buf[k - base];
                    k++;
                }
        base += cnt;
    }
    if (nreduced) *nreduced = m;
    return FL_OK;
}
