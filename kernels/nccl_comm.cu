// nccl_comm.cu — NCCL collectives on CUDA buffers for core/dist.c (docs/distributed.md), built only with
// FL_HAVE_NCCL (the Makefile's NCCL probe). One communicator per process, created from rank 0's unique id
// broadcast over MPI (core/dist.c fl_dist_init_nccl), one non-blocking stream for communication.
// Each call waits for the device's prior work (cudaDeviceSynchronize: the compute streams are the CUDA
// device's own), enqueues the collective on the communication stream and waits for it, so buffers are
// ready on return. FP8 sums use NCCL's native ncclFloat8e4m3/e5m2 (NCCL >= 2.24, sm_90), else refused.
// STATUS: run on one GPU only (docs/distributed.md); the GPU choice with several visible is untested.
#ifdef FL_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>
extern "C" {
#include "dist.h"
#include "cuda_api.h"
}

static ncclComm_t g_comm;
static cudaStream_t g_stream;
static bool g_ready;

static fl_status nccl_st(ncclResult_t r, const char *what) {
    if (r == ncclSuccess) return FL_OK;
    return FL_ERR(FL_EDEVICE, "nccl: %s failed: %s", what, ncclGetErrorString(r));
}
static fl_status cuda_st(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return FL_OK;
    return FL_ERR(FL_EDEVICE, "nccl: %s failed: %s", what, cudaGetErrorString(e));
}

static fl_status dtype_of(fl_dtype dt, ncclDataType_t *out) {
    switch (dt) {
    case FL_F32: *out = ncclFloat32; return FL_OK;
    case FL_F16: *out = ncclFloat16; return FL_OK;
    case FL_BF16: *out = ncclBfloat16; return FL_OK;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
    case FL_E4M3: *out = ncclFloat8e4m3; return FL_OK;
    case FL_E5M2: *out = ncclFloat8e5m2; return FL_OK;
#endif
    default: return FL_ERR(FL_EUNSUPPORTED, "nccl: no reduction for %s buffers in this NCCL", fl_format(dt)->name);
    }
}

extern "C" const char *fl_nccl_version(void) {
    static char v[32];
    int code = 0;
    if (ncclGetVersion(&code) != ncclSuccess) return "unknown";
    snprintf(v, sizeof v, "%d.%d.%d", code / 10000, (code / 100) % 100, code % 100);
    return v;
}

extern "C" int fl_nccl_uid_bytes(void) { return (int)sizeof(ncclUniqueId); }

extern "C" fl_status fl_nccl_get_unique_id(void *uid) { return nccl_st(ncclGetUniqueId((ncclUniqueId *)uid), "ncclGetUniqueId"); }

extern "C" fl_status fl_nccl_init(const void *uid, int rank, int size, int local_rank) {
    if (g_ready) return FL_OK;
    /* The communicator lives on the GPU the compute backend chose (kernels/cuda_device.cu), so collectives
     * and kernels see the same buffers; with several GPUs visible that is local_rank modulo their number. */
    const int dev = fl_cuda_device_ordinal();
    if (dev < 0)
        return FL_ERR(FL_EDEVICE, "nccl: no GPU for rank %d (local rank %d): %s", rank, local_rank,
                      fl_cuda_unavailable_reason());
    FL_TRY(cuda_st(cudaSetDevice(dev), "cudaSetDevice"));
    FL_TRY(cuda_st(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "cudaStreamCreate"));
    ncclUniqueId id;
    memcpy(&id, uid, sizeof id);
    FL_TRY(nccl_st(ncclCommInitRank(&g_comm, size, id, rank), "ncclCommInitRank"));
    g_ready = true;
    return FL_OK;
}

extern "C" bool fl_nccl_ready(void) { return g_ready; }

static fl_status finish(ncclResult_t r, const char *what) {
    FL_TRY(nccl_st(r, what));
    return cuda_st(cudaStreamSynchronize(g_stream), what);
}

extern "C" fl_status fl_nccl_allreduce(void *buf, int64_t n, fl_dtype dt, fl_red_op op) {
    if (!g_ready) return FL_ERR(FL_EINVAL, "nccl: not initialised (InitProcessGroupKwargs{backend=\"nccl\"})");
    ncclDataType_t t;
    FL_TRY(dtype_of(dt, &t));
    FL_TRY(cuda_st(cudaDeviceSynchronize(), "cudaDeviceSynchronize"));
    return finish(ncclAllReduce(buf, buf, (size_t)n, t, op == FL_RED_MAX ? ncclMax : ncclSum, g_comm, g_stream),
                  "ncclAllReduce");
}

extern "C" fl_status fl_nccl_broadcast(void *buf, int64_t bytes, int root) {
    if (!g_ready) return FL_ERR(FL_EINVAL, "nccl: not initialised");
    FL_TRY(cuda_st(cudaDeviceSynchronize(), "cudaDeviceSynchronize"));
    return finish(ncclBroadcast(buf, buf, (size_t)bytes, ncclUint8, root, g_comm, g_stream), "ncclBroadcast");
}

extern "C" fl_status fl_nccl_allgather(const void *send, void *recv, int64_t bytes_each) {
    if (!g_ready) return FL_ERR(FL_EINVAL, "nccl: not initialised");
    FL_TRY(cuda_st(cudaDeviceSynchronize(), "cudaDeviceSynchronize"));
    return finish(ncclAllGather(send, recv, (size_t)bytes_each, ncclUint8, g_comm, g_stream), "ncclAllGather");
}

extern "C" void fl_nccl_abort(void) {
    if (g_ready) ncclCommAbort(g_comm);
    g_ready = false;
}
#endif
