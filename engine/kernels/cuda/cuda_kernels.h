/* What the CUDA kernel files share. Their tables (TL_KERNEL_TABLE at the end of each .c file)
   need no declaration here: CMakeLists.txt lists them for kernels/registry.c. */
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
