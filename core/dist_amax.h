/* dist_amax.h — TransformerEngine's reduce_amax across the data-parallel group (docs/distributed.md):
 * every delayed-scaling role's amax of this step (history[0]) is MAX-reduced over all ranks in one
 * collective for all layers, before the scale update, so that every rank derives the same scales and
 * keeps the same histories. A NaN amax reaches every rank. */
#ifndef FL_DIST_AMAX_H
#define FL_DIST_AMAX_H
#include "error.h"
#include "fp8_linear.h"

/* Flushes the layers' pending observations, then one MAX all-reduce over their delayed roles'
 * history[0]. *nreduced (may be NULL) = number of amaxes reduced. World of one: flush only. Nothing is allocated
 * before the collective (a process that skipped it would leave the others waiting in it), and an all-reduce that MPI
 * fails ends the job by name (MPI_Abort): the processes' scales would differ, or their next collectives not pair. A
 * pairing MPI refused ("did not pair": one process skipped a step) is returned, the script's error on every process. */
fl_status fl_fp8_layers_reduce_amax(fl_fp8_layer *const *layers, int n, int *nreduced);

#endif
