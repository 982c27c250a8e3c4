/* ddp.h — the data-parallel gradient reducer (PyTorch DDP's Reducer; docs/distributed.md).
 * Parameters are grouped, in reverse registration order (the order backward tends to produce their
 * gradients), into buckets of at most bucket_cap bytes of fp32 gradient. During a backward armed with
 * fl_ddp_begin, the autograd grad-ready hook marks parameters done; when a bucket's last parameter is
 * done its gradients are packed into the bucket's flat buffer (divided by the world size, converted to
 * the wire dtype: fp32, or fp16/bf16 for the compression hooks) and its non-blocking all-reduce starts
 * at once, overlapping the rest of backward. fl_ddp_end waits for every bucket and writes the averages
 * back into the parameters' .grad.
 * Parameters whose gradients are FP8 (MS-AMP) are reduced one by one in FP8: a MAX all-reduce of the
 * amax (NaN as +inf) gives every rank one power-of-two scale with room for the world-size sum, each
 * rank casts grad/N with it, and the bytes are summed by a user-defined reduction (decode, add in
 * fp32, re-encode saturating). */
#ifndef FL_DDP_H
#define FL_DDP_H
#include "error.h"
#include "tensor.h"

typedef struct fl_ddp fl_ddp;

typedef struct {
    double bucket_cap_bytes;   /* > 0 */
    fl_dtype wire;             /* FL_F32, FL_F16 or FL_BF16 */
    bool find_unused;          /* parameters without a gradient count as zeros; else an error */
} fl_ddp_opts;

typedef struct {
    int buckets;               /* number of fp32/fp16/bf16 buckets */
    int64_t steps;             /* reductions done */
    int64_t early;             /* buckets whose all-reduce started inside backward (last reduction) */
    int64_t wire_bytes;        /* bytes all-reduced per rank in the last reduction */
    double wait_s;             /* time blocked in fl_ddp_end's waits (last reduction) */
    double comm_s;             /* time inside collective calls during backward (FP8 amax, starts) */
    int64_t fp8_underflow;     /* FP8 path, last reduction: non-zero gradients that became 0 on the wire */
    int64_t fp8_saturated;     /* ... sums that hit the format's max */
    int64_t fp8_n;             /* ... elements sent */
} fl_ddp_stats;

/* params: n leaf tensors (retained), names for messages (copied). */
fl_status fl_ddp_new(fl_ddp **out, fl_tensor *const *params, const char *const *names, int n, const fl_ddp_opts *o);
void fl_ddp_free(fl_ddp *d);
/* Arms the grad-ready hook for the next backward on this thread. */
fl_status fl_ddp_begin(fl_ddp *d);
/* Disarms it, starts what the hook did not (unused parameters: zeros with find_unused, else an
 * error naming the first), waits for all, writes the averaged gradients. */
fl_status fl_ddp_end(fl_ddp *d);
/* fl_ddp_end, told whether this process's backward failed: every process still runs the same collectives and one
 * all-reduce of a failure flag, so a failure anywhere is an error everywhere (none is left waiting, no reduction is
 * left in flight, and the gradients are left as they were). The .grad tensors the write-back needs are made before
 * that flag, so a write-back cannot fail after it. A collective of the step that MPI fails (a start refused twice, a
 * wait, the FP8 amax's or the flag's blocking all-reduce) leaves the processes unable to pair their next collectives
 * (one may have sent part of its messages): the job ends (MPI_Abort) with a message naming it and this rank; a
 * pairing MPI refused ("did not pair", the script's error on every process) is returned, as before.
 * fl_ddp_end(d) is fl_ddp_finish(d, false). */
fl_status fl_ddp_finish(fl_ddp *d, bool failed);
/* Disarms the grad-ready hook (what fl_ddp_finish does first). */
void fl_ddp_cancel(fl_ddp *d);
const fl_ddp_stats *fl_ddp_get_stats(const fl_ddp *d);
/* The bucket (0-based) holding parameter i, -1 for FP8-gradient parameters. */
int fl_ddp_bucket_of(const fl_ddp *d, int i);

#endif
