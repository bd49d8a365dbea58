/* Internal: the one way the host waits for a CUDA stream, counted for tl_cuda_host_waits. */
#ifndef TLUA_CUDA_HOST_WAIT_H
#define TLUA_CUDA_HOST_WAIT_H

#include <cuda_runtime_api.h>

#include "tlua/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Waits for stream on op's behalf (what: why, for the error) and counts the wait in
   tl_cuda_host_waits (tlua/cuda.h): every wait of the host for a device goes through here. */
tl_status tl_cuda_wait(cudaStream_t stream, const char *op, const char *what);

#ifdef __cplusplus
}
#endif

#endif
