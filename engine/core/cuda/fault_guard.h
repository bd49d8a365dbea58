/* Internal: the failure flag of a device's queued index checks, for kernels that write in place. */
#ifndef TLUA_CUDA_FAULT_GUARD_H
#define TLUA_CUDA_FAULT_GUARD_H

#include "tlua/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* *flag: the device's index-check record's id as the checks queued so far leave it (copied
   into device memory in stream order by this call), non-zero when a queued check has failed
   and the host has not raised it yet (cuda/fault.c). A kernel queued after this call that
   reads it first can leave its target untouched when a check failed: an in-place op with a bad
   index then changes nothing, as on the CPU. */
tl_status tl_cuda_fault_flag(int device, const char *op, const volatile unsigned int **flag);

#ifdef __cplusplus
}
#endif

#endif
