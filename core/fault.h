/* fault.h — a test hook: failures made on purpose where a real one cannot be had on demand (an MPI collective that
 * fails on one process, an allocation in DDP's write-back), so that the recovery paths have tests that fail without
 * them (tests/spec/ddpfault_spec.lua; docs/robustness.md, "DDP failures that repeat or stop partway (stop 104)").
 * FP8LAB_FAULT_DIST="SITE:N[-M][@RANK][,...]": the N-th (to the M-th) call of fl_fault(SITE, rank) made on process
 * RANK (every process without @; N, M and RANK digits only) answers true, and the caller fails as it would on a real failure there. Sites:
 * "allreduce" (a blocking all-reduce), "iallreduce" (a non-blocking one's start), "wait" (its wait), "ddp_grad" (DDP's
 * new .grad tensor), and since stop 105 "broadcast", "allgather", "reduce_scatter", "barrier" (the blocking ones of
 * those names: a user's collectives, tests/spec/distfault_spec.lua), "ddp_pack" (the fp32 copy a bucket of a 16-bit
 * comm_hook is packed through). Read once, at the first call; unset (every normal run), each call is one branch. */
#ifndef FL_FAULT_H
#define FL_FAULT_H
#include <stdbool.h>

bool fl_fault(const char *site, int rank);

#endif
