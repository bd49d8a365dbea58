/* Internal: the failure flag of a device's queued index checks, for kernels that write in place. */
#ifndef TLUA_CUDA_FAULT_GUARD_H
#define TLUA_CUDA_FAULT_GUARD_H

#include "tlua/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* *flag: the device's view of its index-check record's id, non-zero once a queued check has
   failed and until the host raises it (cuda/fault.c). A kernel queued after the check that
   reads it first can leave its target untouched when the check failed: an in-place op with a
   bad index then changes nothing, as on the CPU. */
tl_status tl_cuda_fault_flag(int device, const char *op, const volatile unsigned int **flag);

#ifdef __cplusplus
}
#endif

#endif
