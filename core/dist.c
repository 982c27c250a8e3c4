/* dist.c — the communicator of dist.h over MPI (FL_HAVE_MPI), or a world of one without it.
 * Reductions of 16-bit and FP8 buffers are user-defined MPI_Ops that decode, add in fp32 and
 * re-encode (what a wire format narrower than the accumulator needs); the float MAX is NaN-propagating
 * (MPI_MAX's comparisons would drop a NaN, and an amax of NaN must reach every rank). */
#include "dist.h"
#include "fault.h"
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef FL_HAVE_MPI
#include <mpi.h>
#endif

#ifdef FL_HAVE_NCCL
/* kernels/nccl_comm.cu */
const char *fl_nccl_version(void);
int fl_nccl_uid_bytes(void);
fl_status fl_nccl_get_unique_id(void *uid);
fl_status fl_nccl_init(const void *uid, int rank, int size, int local_rank);
bool fl_nccl_ready(void);
fl_status fl_nccl_allreduce(void *buf, int64_t n, fl_dtype dt, fl_red_op op);
fl_status fl_nccl_broadcast(void *buf, int64_t bytes, int root);
fl_status fl_nccl_allgather(const void *send, void *recv, int64_t bytes_each);
void fl_nccl_abort(void);
#endif

static int g_rank = 0, g_size = 1, g_local = 0;
static bool g_init = false;          /* MPI_Init ran here */
static double g_timeout = 0.0;

bool fl_dist_built_mpi(void) {
#ifdef FL_HAVE_MPI
    return true;
#else
    return false;
#endif
}

const char *fl_dist_mpi_version(void) {
#ifdef FL_HAVE_MPI
    static char v[MPI_MAX_LIBRARY_VERSION_STRING];
    if (!v[0]) {
        int len = 0;
        MPI_Get_library_version(v, &len);   /* callable before MPI_Init (MPI-3) */
        char *nl = strchr(v, '\n');
        if (nl) *nl = 0;
        for (int i = (int)strlen(v) - 1; i >= 0 && (v[i] == ' ' || v[i] == ','); i--) v[i] = 0;
    }
    return v;
#else
    return "";
#endif
}

static const char *env(const char *n) { const char *v = getenv(n); return v && *v ? v : NULL; }
static int env_int(const char *const *names, int def) {
    for (int i = 0; names[i]; i++) { const char *v = env(names[i]); if (v) return atoi(v); }
    return def;
}

bool fl_dist_launched(void) {
    return env("OMPI_COMM_WORLD_SIZE") || env("PMIX_RANK") || env("PMI_RANK") || env("PMI_SIZE") ||
           (env("SLURM_PROCID") && env("SLURM_STEP_ID"));
}

static const char *const RANK_VARS[] = { "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", NULL };
static const char *const SIZE_VARS[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", NULL };
static const char *const LOCAL_VARS[] = { "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", NULL };

int fl_dist_env_rank(void) { return fl_dist_launched() ? env_int(RANK_VARS, 0) : 0; }
int fl_dist_env_size(void) { return fl_dist_launched() ? env_int(SIZE_VARS, 1) : 1; }
int fl_dist_env_local_rank(void) { return fl_dist_launched() ? env_int(LOCAL_VARS, fl_dist_env_rank()) : 0; }

bool fl_dist_initialized(void) { return g_init; }
int fl_dist_rank(void) { return g_rank; }
int fl_dist_size(void) { return g_size; }
int fl_dist_local_rank(void) { return g_local; }
double fl_dist_timeout(void) { return g_timeout; }

/* ---- watchdog ---------------------------------------------------------------------------- */
#ifdef FL_HAVE_MPI

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The collective this thread is blocked in, and since when (0: none). Written by the caller, read by
 * the watchdog thread. */
static _Atomic double wd_since;
static _Atomic(const char *) wd_what;
static pthread_t wd_thread;
static bool wd_started;

static void wd_enter(const char *what) { atomic_store(&wd_what, what); atomic_store(&wd_since, now_s()); }
static void wd_leave(void) { atomic_store(&wd_since, 0.0); }

static void *watchdog(void *arg) {
    (void)arg;
    for (;;) {
        usleep(100000);
        double t0 = atomic_load(&wd_since), to = g_timeout;
        if (t0 > 0 && to > 0 && now_s() - t0 > to) {
            /* A rank left waiting is often not facing a stuck one but one in a call it did not make itself (a
             * save_state or gather under `if acc:is_main_process()`): the message says so, and a rank that ended
             * its script says that it did. */
            char msg[512];
            const char *what = atomic_load(&wd_what);
            if (strcmp(what, "MPI_Finalize") == 0)
                snprintf(msg, sizeof msg, "rank %d ended its script and waited %.0f s in MPI_Finalize for the other "
                         "ranks, past the process group timeout of %g s (one is stuck, gone, or in a collective call "
                         "this rank did not make: a save_state, gather or wait_for_everyone called on some processes "
                         "only, e.g. under `if acc:is_main_process()`); the watchdog ends the job",
                         g_rank, now_s() - t0, to);
            else
                snprintf(msg, sizeof msg, "rank %d: %s waited %.0f s, past the process group timeout of %g s "
                         "(another rank is stuck, gone, or in another collective call: every process must make the "
                         "same calls, so no save_state, gather or wait_for_everyone under `if acc:is_main_process()`); "
                         "the watchdog ends the job", g_rank, what, now_s() - t0, to);
            fl_dist_abort(msg);
        }
    }
    return NULL;
}
#else
__attribute__((unused)) static void wd_enter(const char *what) { (void)what; }
__attribute__((unused)) static void wd_leave(void) {}
#endif

void fl_dist_abort_status(const char *msg, int status) {
    if (status < 1 || status > 255) status = 1;
    fprintf(stderr, "fp8lab: %s\n", msg);
    fflush(stderr);
#ifdef FL_HAVE_NCCL
    fl_nccl_abort();   /* ncclCommAbort: frees a communicator stuck in a collective */
#endif
#ifdef FL_HAVE_MPI
    if (g_init) MPI_Abort(MPI_COMM_WORLD, status);
#endif
    _exit(status);
}

void fl_dist_abort(const char *msg) { fl_dist_abort_status(msg, 1); }

/* ---- init / exit ------------------------------------------------------------------------- */

/* Collectives that MPI (or the fault hook) failed on this thread, a pairing refused (MPI_ERR_TRUNCATE) aside */
static _Thread_local unsigned t_failures;
unsigned fl_dist_failures(void) { return t_failures; }

#ifdef FL_HAVE_MPI
static MPI_Op op_sum16[2], op_sum8[2], op_nanmax;
static bool ops_made;

/* The sums of the 16-bit and FP8 formats, 256 values at a time through fp32 with the vectorised bulk conversions
 * (the same bits as converting one value at a time, which they replaced: docs/performance.md, "Data parallel: the
 * FP8 sum ..."). */
static void sum_16(const uint16_t *a, uint16_t *b, size_t n, bool bf) {
    float fa[256], fb[256];
    for (size_t i = 0; i < n; i += 256) {
        const size_t m = n - i < 256 ? n - i : 256;
        if (bf) { fl_bf16_to_f32_n(a + i, fa, m); fl_bf16_to_f32_n(b + i, fb, m); }
        else { fl_f16_to_f32_n(a + i, fa, m); fl_f16_to_f32_n(b + i, fb, m); }
        for (size_t j = 0; j < m; j++) fa[j] += fb[j];
        if (bf) fl_f32_to_bf16_n(fa, b + i, m); else fl_f32_to_f16_n(fa, b + i, m);
    }
}
static void sum_f16(void *in, void *inout, int *len, MPI_Datatype *dt) { sum_16(in, inout, (size_t)*len, false); }
static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *dt) { sum_16(in, inout, (size_t)*len, true); }
static void sum_e4m3(void *in, void *inout, int *len, MPI_Datatype *dt) { fl_fp8_add_n(in, inout, (size_t)*len, FL_E4M3); }
static void sum_e5m2(void *in, void *inout, int *len, MPI_Datatype *dt) { fl_fp8_add_n(in, inout, (size_t)*len, FL_E5M2); }
static void nanmax_f32(void *in, void *inout, int *len, MPI_Datatype *dt) {
    const float *a = in; float *b = inout;
    for (int i = 0; i < *len; i++) {
        if (isnan(b[i])) continue;
        if (isnan(a[i]) || a[i] > b[i]) b[i] = a[i];
    }
}

/* An MPI error as a status (MPI_ERRORS_RETURN is set on the world communicator). */
static fl_status mpi_st(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return FL_OK;
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, s, &len);
    int cls = 0;
    MPI_Error_class(rc, &cls);
    if (cls != MPI_ERR_TRUNCATE) t_failures++;   /* (fl_dist_failures) */
    /* a message longer than the receive buffer: the collectives of two processes paired wrongly (one in another
     * collective, or the same one with another count), a script's error, not the network's */
    if (cls == MPI_ERR_TRUNCATE)
        return FL_ERR(FL_EDEVICE, "dist: %s failed on rank %d: %s (the processes' collectives did not pair: every "
                                  "process must make the same collective calls in the same order)", what, g_rank, s);
    /* Open MPI answers MPI_ERR_INTERN where an allocation of its own fails (OMPI_ERR_OUT_OF_RESOURCE's MPI class:
     * its temporary buffers, libnbc's schedules), the standard's MPI_ERR_NO_MEM only in MPI_Alloc_mem: an out of
     * memory, named as the core's are (under `ulimit -v` with the address space taken, every collective answered
     * MPI_ERR_INTERN: stop 103). No retry follows it (the bindings take a collective's status with fl_lcheck). */
    if (cls == MPI_ERR_INTERN || cls == MPI_ERR_NO_MEM)
        return FL_ERR(FL_ENOMEM, "dist: %s failed on rank %d: out of memory inside MPI (%s; Open MPI's answer where "
                                 "an allocation of its own fails)", what, g_rank, s);
    return FL_ERR(FL_EDEVICE, "dist: %s failed on rank %d: %s", what, g_rank, s);
}
#endif

/* FP8LAB_FAULT_DIST's failure of a collective on this rank (core/fault.h, a test hook): the call returns this error
 * without the collective (a blocking one: the others wait in it, as they would for one that failed partway) */
#define INJECTED(site, what) \
    if (fl_fault(site, g_rank) && ++t_failures) \
        return FL_ERR(FL_EDEVICE, "dist: %s failed on rank %d: a failure injected by FP8LAB_FAULT_DIST (a test hook)", \
                      what, g_rank)

/* The process's exit status decides between MPI_Finalize and ending the job (a script error, or
 * os.exit(1) in a script, on one rank must not leave the others waiting in a collective). */
#ifdef FL_HAVE_MPI
static void on_exit_handler(int status, void *arg) { (void)arg; fl_dist_exit(status); }
#endif

fl_status fl_dist_init(double timeout_s) {
    if (timeout_s > 0) g_timeout = timeout_s;
    if (g_init || !fl_dist_launched()) return FL_OK;
#ifndef FL_HAVE_MPI
    if (fl_dist_env_size() > 1)
        return FL_ERR(FL_EUNSUPPORTED, "dist: started as rank %d of %d by an MPI launcher, but this fp8lab was built "
                      "without MPI (install libopenmpi-dev and rebuild with MPI=auto or MPI=1)",
                      fl_dist_env_rank(), fl_dist_env_size());
    return FL_OK;
#else
    /* the watchdog runs before MPI_Init_thread, which waits for every rank: one that ended without joining (a script
     * that returned early there) would otherwise hold this one forever, past the timeout (torch's rendezvous has
     * one) */
    /* (made with the host's signals blocked: a Ctrl-C goes to the main thread, fl_signals_block. MPI's own threads,
     * made in MPI_Init_thread, are not: a second Ctrl-C while it waits for the other ranks must still kill; one that
     * lands on such a thread is sent on to the main one, lua/main.c) */
    sigset_t old_mask;
    fl_signals_block(&old_mask);
    if (!wd_started && pthread_create(&wd_thread, NULL, watchdog, NULL) == 0) {
        pthread_detach(wd_thread);
        wd_started = true;
    }
    fl_signals_restore(&old_mask);
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        g_rank = fl_dist_env_rank();   /* for the watchdog's message */
        wd_enter("MPI_Init_thread (joining the other ranks)");
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        wd_leave();
        if (rc != MPI_SUCCESS) return FL_ERR(FL_EDEVICE, "dist: MPI_Init_thread failed (code %d)", rc);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    g_local = env_int(LOCAL_VARS, g_rank);
    if (!ops_made) {
        MPI_Op_create(sum_f16, 1, &op_sum16[0]);
        MPI_Op_create(sum_bf16, 1, &op_sum16[1]);
        MPI_Op_create(sum_e4m3, 1, &op_sum8[0]);
        MPI_Op_create(sum_e5m2, 1, &op_sum8[1]);
        MPI_Op_create(nanmax_f32, 1, &op_nanmax);
        ops_made = true;
    }
    g_init = true;
    on_exit(on_exit_handler, NULL);
    return FL_OK;
#endif
}

void fl_dist_exit(int status) {
    if (!g_init) return;
#ifdef FL_HAVE_MPI
    if (status != 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "rank %d of %d failed (exit status %d); ending the job", g_rank, g_size,
                 status);
        fl_dist_abort_status(msg, status);
    }
    wd_enter("MPI_Finalize");
    MPI_Finalize();
    wd_leave();
    g_init = false;
#endif
}

/* ---- collectives ------------------------------------------------------------------------- */

struct fl_dist_req {
#ifdef FL_HAVE_MPI
    MPI_Request r;
#endif
    const char *what;
};

#ifdef FL_HAVE_MPI
static fl_status pick(fl_dtype dt, fl_red_op op, MPI_Datatype *mt, MPI_Op *mo) {
    if (op == FL_RED_MAX) {
        if (dt != FL_F32) return FL_ERR(FL_EUNSUPPORTED, "dist: MAX reductions take fp32 buffers, got %s", fl_format(dt)->name);
        *mt = MPI_FLOAT; *mo = op_nanmax; return FL_OK;
    }
    switch (dt) {
    case FL_F32: *mt = MPI_FLOAT; *mo = MPI_SUM; return FL_OK;
    case FL_F16: *mt = MPI_UINT16_T; *mo = op_sum16[0]; return FL_OK;
    case FL_BF16: *mt = MPI_UINT16_T; *mo = op_sum16[1]; return FL_OK;
    case FL_E4M3: *mt = MPI_UINT8_T; *mo = op_sum8[0]; return FL_OK;
    case FL_E5M2: *mt = MPI_UINT8_T; *mo = op_sum8[1]; return FL_OK;
    default: return FL_ERR(FL_EUNSUPPORTED, "dist: no reduction for %s buffers", fl_format(dt)->name);
    }
}
#endif

static fl_status check_n(int64_t n, const char *what) {
    if (n < 0 || n > INT32_MAX) return FL_ERR(FL_EINVAL, "dist: %s of %lld elements (0 .. 2^31-1 per call)", what, (long long)n);
    return FL_OK;
}

fl_status fl_dist_allreduce(void *buf, int64_t n, fl_dtype dt, fl_red_op op) {
    FL_TRY(check_n(n, "all_reduce"));
    if (!g_init || n == 0) return FL_OK;
#ifdef FL_HAVE_MPI
    MPI_Datatype mt; MPI_Op mo;
    FL_TRY(pick(dt, op, &mt, &mo));
    INJECTED("allreduce", "all_reduce");
    wd_enter("all_reduce");
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, mt, mo, MPI_COMM_WORLD);
    wd_leave();
    return mpi_st(rc, "all_reduce");
#else
    return FL_OK;
#endif
}

fl_status fl_dist_iallreduce(void *buf, int64_t n, fl_dtype dt, fl_red_op op, fl_dist_req **req) {
    *req = NULL;
    FL_TRY(check_n(n, "all_reduce"));
    if (!g_init || n == 0) return FL_OK;     /* a NULL handle waits for nothing */
#ifdef FL_HAVE_MPI
    MPI_Datatype mt; MPI_Op mo;
    FL_TRY(pick(dt, op, &mt, &mo));
    INJECTED("iallreduce", "MPI_Iallreduce");
    fl_dist_req *q = calloc(1, sizeof *q);
    if (!q) return FL_ERR(FL_ENOMEM, "dist: out of memory for a request");
    q->what = "all_reduce (non-blocking)";
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mt, mo, MPI_COMM_WORLD, &q->r);
    if (rc != MPI_SUCCESS) { free(q); return mpi_st(rc, "MPI_Iallreduce"); }
    *req = q;
    return FL_OK;
#else
    return FL_OK;
#endif
}

fl_status fl_dist_test(fl_dist_req *req, bool *done) {
    *done = true;
    if (!req) return FL_OK;
#ifdef FL_HAVE_MPI
    int flag = 0;
    int rc = MPI_Test(&req->r, &flag, MPI_STATUS_IGNORE);
    *done = flag != 0;
    return mpi_st(rc, "MPI_Test");
#else
    return FL_OK;
#endif
}

fl_status fl_dist_wait(fl_dist_req *req) {
    if (!req) return FL_OK;
    fl_status st = FL_OK;
#ifdef FL_HAVE_MPI
    wd_enter(req->what);
    int rc = MPI_Wait(&req->r, MPI_STATUS_IGNORE);
    wd_leave();
    st = mpi_st(rc, "MPI_Wait");
    if (st == FL_OK && fl_fault("wait", g_rank) && ++t_failures)   /* (after the wait: the request is complete) */
        st = FL_ERR(FL_EDEVICE, "dist: MPI_Wait failed on rank %d: a failure injected by FP8LAB_FAULT_DIST (a test "
                    "hook)", g_rank);
#endif
    free(req);
    return st;
}

fl_status fl_dist_broadcast(void *buf, int64_t bytes, int root) {
    FL_TRY(check_n(bytes, "broadcast"));
    if (root < 0 || root >= g_size) return FL_ERR(FL_EINVAL, "dist: broadcast root %d outside 0..%d", root, g_size - 1);
    if (!g_init || bytes == 0) return FL_OK;
#ifdef FL_HAVE_MPI
    INJECTED("broadcast", "broadcast");
    wd_enter("broadcast");
    int rc = MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD);
    wd_leave();
    return mpi_st(rc, "broadcast");
#else
    return FL_OK;
#endif
}

fl_status fl_dist_allgather(const void *send, void *recv, int64_t bytes_each) {
    FL_TRY(check_n(bytes_each, "all_gather"));
    if (!g_init) { if (recv != send) memcpy(recv, send, (size_t)bytes_each); return FL_OK; }
#ifdef FL_HAVE_MPI
    INJECTED("allgather", "all_gather");
    wd_enter("all_gather");
    int rc = MPI_Allgather(send, (int)bytes_each, MPI_BYTE, recv, (int)bytes_each, MPI_BYTE, MPI_COMM_WORLD);
    wd_leave();
    return mpi_st(rc, "all_gather");
#else
    return FL_OK;
#endif
}

fl_status fl_dist_reduce_scatter(const void *send, void *recv, int64_t n_each, fl_dtype dt, fl_red_op op) {
    FL_TRY(check_n(n_each, "reduce_scatter"));
    if (!g_init) { if (recv != send) memcpy(recv, send, (size_t)n_each * fl_format(dt)->bits / 8); return FL_OK; }
#ifdef FL_HAVE_MPI
    MPI_Datatype mt; MPI_Op mo;
    FL_TRY(pick(dt, op, &mt, &mo));
    INJECTED("reduce_scatter", "reduce_scatter");
    wd_enter("reduce_scatter");
    int rc = MPI_Reduce_scatter_block(send, recv, (int)n_each, mt, mo, MPI_COMM_WORLD);
    wd_leave();
    return mpi_st(rc, "reduce_scatter");
#else
    return FL_OK;
#endif
}

fl_status fl_dist_barrier(void) {
    if (!g_init) return FL_OK;
#ifdef FL_HAVE_MPI
    INJECTED("barrier", "barrier");
    wd_enter("barrier");
    int rc = MPI_Barrier(MPI_COMM_WORLD);
    wd_leave();
    return mpi_st(rc, "barrier");
#else
    return FL_OK;
#endif
}

bool fl_dist_built_nccl(void) {
#ifdef FL_HAVE_NCCL
    return true;
#else
    return false;
#endif
}

const char *fl_dist_nccl_version(void) {
#ifdef FL_HAVE_NCCL
    return fl_nccl_version();
#else
    return "";
#endif
}

bool fl_dist_nccl_ready(void) {
#ifdef FL_HAVE_NCCL
    return fl_nccl_ready();
#else
    return false;
#endif
}

fl_status fl_dist_init_nccl(void) {
#ifndef FL_HAVE_NCCL
    return FL_ERR(FL_EUNSUPPORTED, "dist: backend \"nccl\" is not available: this fp8lab was built without NCCL "
                  "(needs CUDA and libnccl at build time; GPU collectives are refused); use backend \"mpi\"");
#else
    if (fl_nccl_ready()) return FL_OK;
    if (fl_dist_launched() && !g_init) return FL_ERR(FL_EINVAL, "dist: initialise MPI (fl_dist_init) before NCCL");
    unsigned char uid[512];
    int nb = fl_nccl_uid_bytes();
    if (nb <= 0 || nb > (int)sizeof uid) return FL_ERR(FL_EDEVICE, "dist: NCCL unique id of %d bytes", nb);
    if (g_rank == 0) FL_TRY(fl_nccl_get_unique_id(uid));
    FL_TRY(fl_dist_broadcast(uid, nb, 0));   /* over MPI; a world of one keeps its own */
    return fl_nccl_init(uid, g_rank, g_size, g_local);
#endif
}

fl_status fl_dist_check_tensor_cpu(const fl_tensor *t, const char *what) {
    if (t->device != FL_DEV_CPU)
        return FL_ERR(FL_EUNSUPPORTED, "%s: takes CPU tensors only (MPI), got one on %s", what,
                      t->device == FL_DEV_CUDA ? "cuda" : "another device");
    if (!fl_tensor_is_contiguous(t)) return FL_ERR(FL_EINVAL, "%s: the tensor must be contiguous", what);
    return FL_OK;
}

static size_t tbytes(const fl_tensor *t) { return (size_t)fl_tensor_numel(t) * fl_format(t->dtype)->bits / 8; }

fl_status fl_dist_tensor_allreduce(fl_tensor *t, fl_red_op op) {
    FL_TRY(fl_dist_check_tensor(t, "all_reduce"));
    /* an in-place write (fl_tensor_bump): a graph that saved t refuses its backward, the FP8 weight cache recasts */
    fl_tensor_bump(t);
    if (t->device == FL_DEV_CPU) return fl_dist_allreduce(fl_tensor_data(t), fl_tensor_numel(t), t->dtype, op);
#ifdef FL_HAVE_NCCL
    wd_enter("all_reduce (NCCL)");
    fl_status st = fl_nccl_allreduce(fl_tensor_data(t), fl_tensor_numel(t), t->dtype, op);
    wd_leave();
    return st;
#else
    return FL_ERR(FL_EUNSUPPORTED, "all_reduce: no NCCL");
#endif
}

fl_status fl_dist_tensor_broadcast(fl_tensor *t, int root) {
    FL_TRY(fl_dist_check_tensor(t, "broadcast"));
    fl_tensor_bump(t);   /* an in-place write, as all_reduce's */
    if (t->device == FL_DEV_CPU) return fl_dist_broadcast(fl_tensor_data(t), (int64_t)tbytes(t), root);
#ifdef FL_HAVE_NCCL
    if (root < 0 || root >= g_size) return FL_ERR(FL_EINVAL, "dist: broadcast root %d outside 0..%d", root, g_size - 1);
    wd_enter("broadcast (NCCL)");
    fl_status st = fl_nccl_broadcast(fl_tensor_data(t), (int64_t)tbytes(t), root);
    wd_leave();
    return st;
#else
    return FL_ERR(FL_EUNSUPPORTED, "broadcast: no NCCL");
#endif
}

fl_status fl_dist_tensor_allgather(const fl_tensor *t, fl_tensor *out) {
    FL_TRY(fl_dist_check_tensor(t, "all_gather"));
    if (out->device != t->device || out->dtype != t->dtype || !fl_tensor_is_contiguous(out) ||
        fl_tensor_numel(out) != fl_tensor_numel(t) * g_size)
        return FL_ERR(FL_EINVAL, "all_gather: the output must be a contiguous tensor of world size × the input");
    if (t->device == FL_DEV_CPU) return fl_dist_allgather(fl_tensor_data(t), fl_tensor_data(out), (int64_t)tbytes(t));
#ifdef FL_HAVE_NCCL
    wd_enter("all_gather (NCCL)");
    fl_status st = fl_nccl_allgather(fl_tensor_data(t), fl_tensor_data(out), (int64_t)tbytes(t));
    wd_leave();
    return st;
#else
    return FL_ERR(FL_EUNSUPPORTED, "all_gather: no NCCL");
#endif
}

fl_status fl_dist_check_tensor(const fl_tensor *t, const char *what) {
    if (t->device == FL_DEV_CUDA && fl_dist_nccl_ready()) {
        if (!fl_tensor_is_contiguous(t)) return FL_ERR(FL_EINVAL, "%s: the tensor must be contiguous", what);
        return FL_OK;
    }
    if (t->device != FL_DEV_CPU)
        return FL_ERR(FL_EUNSUPPORTED, "%s: a tensor on %s needs NCCL, which this build does not have "
                      "(collectives run on CPU tensors through MPI)", what, t->device == FL_DEV_CUDA ? "cuda" : "another device");
    if (!fl_tensor_is_contiguous(t)) return FL_ERR(FL_EINVAL, "%s: the tensor must be contiguous", what);
    return FL_OK;
}
