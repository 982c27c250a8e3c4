/* dist_amax.c — one fused MAX all-reduce of the delayed roles' amaxes (dist_amax.h). */
#include "dist_amax.h"
#include "dist.h"
#include <stdlib.h>

fl_status fl_fp8_layers_reduce_amax(fl_fp8_layer *const *layers, int n, int *nreduced) {
    if (nreduced) *nreduced = 0;
    int m = 0;
    for (int i = 0; i < n; i++)
        for (int r = 0; r < FL_NROLES; r++) {
            FL_TRY(fl_scaling_flush(&layers[i]->role[r]));
            if (layers[i]->role[r].rule == FL_SCALE_DELAYED) m++;
        }
    if (fl_dist_size() <= 1 || m == 0) return FL_OK;
    float *buf = malloc((size_t)m * sizeof *buf);
    if (!buf) return FL_ERR(FL_ENOMEM, "reduce_amax: out of memory");
    int k = 0;
    for (int i = 0; i < n; i++)
        for (int r = 0; r < FL_NROLES; r++)
            if (layers[i]->role[r].rule == FL_SCALE_DELAYED) buf[k++] = layers[i]->role[r].history[0];
    fl_status st = fl_dist_allreduce(buf, m, FL_F32, FL_RED_MAX);
    if (st == FL_OK) {
        k = 0;
        for (int i = 0; i < n; i++)
            for (int r = 0; r < FL_NROLES; r++)
                if (layers[i]->role[r].rule == FL_SCALE_DELAYED) layers[i]->role[r].history[0] = buf[k++];
        if (nreduced) *nreduced = m;
    }
    free(buf);
    return st;
}
