/* dist.h — the communicator interface of data parallelism (docs/distributed.md): all-reduce,
 * broadcast, all-gather, reduce-scatter and barrier over the processes of one job, blocking or
 * non-blocking with a wait handle. One implementation today: MPI (OpenMPI; mpirun or srun start and
 * wire the processes) for CPU buffers. NCCL is not built in: a CUDA tensor or backend "nccl" is refused
 * with a message, never sent some other way.
 * MPI is initialised only when the process was started by an MPI launcher (OMPI_*, PMIX_*, PMI_* or
 * Slurm step variables, fl_dist_launched); a plain single process makes no MPI call at all and every
 * collective is the identity over a world of one.
 * A watchdog thread (fl_dist_init's timeout) ends the whole job with MPI_Abort when one collective
 * has waited longer than the timeout, naming this rank and the collective. */
#ifndef FL_DIST_H
#define FL_DIST_H
#include <stdbool.h>
#include <stdint.h>
#include "error.h"
#include "format.h"
#include "tensor.h"

typedef enum { FL_RED_SUM = 0, FL_RED_MAX = 1, FL_RED_COUNT } fl_red_op;

typedef struct fl_dist_req fl_dist_req;    /* a started non-blocking collective */

/* Build-time facts. */
bool fl_dist_built_mpi(void);
const char *fl_dist_mpi_version(void);     /* the library's version string ("" without MPI) */

/* Was this process started by an MPI launcher? (environment only; no MPI call) */
bool fl_dist_launched(void);
/* Rank / size / local rank the launcher announced in the environment (0/1/0 when not launched). */
int fl_dist_env_rank(void);
int fl_dist_env_size(void);
int fl_dist_env_local_rank(void);   /* the rank when the launcher announces no local rank */

/* Initialise MPI once (MPI_Init_thread) when launched; otherwise a world of one, no MPI call.
 * timeout_s > 0 arms the collective watchdog (and later calls may change the timeout). Errors when
 * launched with more than one process but built without MPI. */
fl_status fl_dist_init(double timeout_s);
bool fl_dist_initialized(void);            /* true once MPI_Init ran (false for a world of one) */
int fl_dist_rank(void);
int fl_dist_size(void);
int fl_dist_local_rank(void);
double fl_dist_timeout(void);

/* In place over n elements of dtype dt. SUM: F32 sums in fp32; F16/BF16 are decoded, summed in fp32
 * and re-encoded on every hop; E4M3/E5M2 likewise, re-encoded saturating (the caller chose a scale
 * with room for the sum). MAX: F32 only, NaN-propagating (NaN beats everything). */
fl_status fl_dist_allreduce(void *buf, int64_t n, fl_dtype dt, fl_red_op op);
fl_status fl_dist_iallreduce(void *buf, int64_t n, fl_dtype dt, fl_red_op op, fl_dist_req **req);
/* Wait for a started collective and free its handle (NULL: no-op). */
fl_status fl_dist_wait(fl_dist_req *req);
/* Drive progress of started collectives without blocking (MPI_Test); *done when complete. */
fl_status fl_dist_test(fl_dist_req *req, bool *done);
fl_status fl_dist_broadcast(void *buf, int64_t bytes, int root);
/* recv holds size × bytes_each: rank r's block at r·bytes_each. */
fl_status fl_dist_allgather(const void *send, void *recv, int64_t bytes_each);
/* send holds size × n_each elements; rank r receives the reduction of block r. */
fl_status fl_dist_reduce_scatter(const void *send, void *recv, int64_t n_each, fl_dtype dt, fl_red_op op);
fl_status fl_dist_barrier(void);

/* NCCL (kernels/nccl_comm.cu, built with FL_HAVE_NCCL): after fl_dist_init, rank 0's unique id goes to
 * every rank over MPI (a world of one needs no MPI) and each rank joins the communicator on GPU
 * local_rank % device count. Errors when not built in. */
bool fl_dist_built_nccl(void);
const char *fl_dist_nccl_version(void);    /* "" without NCCL */
fl_status fl_dist_init_nccl(void);
bool fl_dist_nccl_ready(void);

/* Tensor front: the tensor's device picks the engine (CPU → MPI; CUDA → NCCL when initialised, else
 * refused). fl_dist_check_tensor accepts what the front can take; cpu_only for the MPI-only calls. */
fl_status fl_dist_check_tensor(const fl_tensor *t, const char *what);
fl_status fl_dist_check_tensor_cpu(const fl_tensor *t, const char *what);
fl_status fl_dist_tensor_allreduce(fl_tensor *t, fl_red_op op);
fl_status fl_dist_tensor_broadcast(fl_tensor *t, int root);
/* out: a contiguous tensor of size × t's elements, same dtype and device. */
fl_status fl_dist_tensor_allgather(const fl_tensor *t, fl_tensor *out);

/* End of the process: status 0 → MPI_Finalize; non-zero → one message naming this rank, then
 * MPI_Abort so that every other rank ends too. No-op when MPI was never initialised. */
void fl_dist_exit(int status);
/* Abort the whole job now with a message (the watchdog's and fl_dist_exit's path). */
void fl_dist_abort(const char *msg);

/* How many collectives MPI (or FP8LAB_FAULT_DIST) failed on this thread so far, a pairing MPI refused
 * (MPI_ERR_TRUNCATE: every process meets it) aside: a binding compares it before and after a collective to tell a
 * collective that failed on this process (which ends the job, lua/l_dist.c) from a refusal before anything was
 * sent (its arguments). */
unsigned fl_dist_failures(void);
/* The same, ending the job with `status` (1..255; others become 1): a rank's own exit status reaches mpirun. */
void fl_dist_abort_status(const char *msg, int status);

#endif
