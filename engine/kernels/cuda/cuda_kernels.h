/* What every CUDA kernel file includes for the kernel signatures and the table macros
   (kernels/kernel.h, with C linkage in CUDA C++). Their tables (TL_KERNEL_TABLE at the end of
   each .cu, or .c, file) need no declaration here: CMakeLists.txt lists them for
   kernels/registry.c. */
#ifndef TLUA_CUDA_KERNELS_H
#define TLUA_CUDA_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/kernel.h"

#ifdef __cplusplus
}
#endif

#endif
