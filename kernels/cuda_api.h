/* cuda_api.h — the plain-C face of the CUDA backend (implemented in kernels/cuda_device.cu), for
 * core/device.c and lua/l_cuda.c, which must not include CUDA headers. Only linked with FL_HAVE_CUDA. */
#ifndef FL_CUDA_API_H
#define FL_CUDA_API_H

#include <stddef.h>
#include "error.h"

/* Registers the "cuda" device (FL_DEV_CUDA) when a GPU is usable. Called lazily by
 * fl_device_get(FL_DEV_CUDA). Without a GPU/driver it prints, once per process, the line
 * "fp8lab: CUDA built in but no GPU available (<reason>)" on stderr and returns
 * FL_EDEVICE with the reason as the message. Later calls repeat the outcome without printing. */
fl_status fl_cuda_register(void);

/* Number of GPUs fp8lab can run on (context and kernel image checked once); 0, quietly (no
 * notice), when there is no device or driver. */
int fl_cuda_device_count(void);
/* The GPU this process computes on (initialising the backend if needed): the launcher's local rank
 * (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID; else the rank; 0 when not launched) modulo
 * the GPUs visible. -1 without a usable GPU. NCCL's communicator is made on the same GPU. */
int fl_cuda_device_ordinal(void);
/* Why CUDA is unusable ("" when it is usable or has not been probed). */
const char *fl_cuda_unavailable_reason(void);
/* Waits for all queued work on the fp8lab stream. FL_EDEVICE when no GPU is in use. */
fl_status fl_cuda_synchronize(void);
/* Bytes held by live tensors (size-class rounded), and the peak since start or the last reset.
 * 0 before the device is registered. */
size_t fl_cuda_memory_allocated(void);
size_t fl_cuda_max_memory_allocated(void);
void fl_cuda_reset_peak_memory(void);
/* Bytes cached by the allocator (live + free blocks kept for reuse). */
size_t fl_cuda_memory_reserved(void);
size_t fl_cuda_max_memory_reserved(void);   /* its peak since start or the last reset */
/* Returns cached free blocks to the driver. */
void fl_cuda_empty_cache(void);

/* The device-side fp32 -> FP8 conversion and FP8 decode, run on the host (they are
 * __host__ __device__), so tests can check them against format.c without a GPU.
 * fmt is an fl_dtype (FL_E4M3 / FL_E5M2), policy an fl_overflow. */
unsigned char fl_cuda_cvt_fp8_host(float x, int fmt, int policy);
float fl_cuda_decode_fp8_host(unsigned char b, int fmt);

#endif
