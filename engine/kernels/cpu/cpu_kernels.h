/* What the CPU kernel files share. Their tables (TL_KERNEL_TABLE at each file's end) need no
   declaration here: CMakeLists.txt lists them for kernels/registry.c. */
#ifndef TLUA_CPU_KERNELS_H
#define TLUA_CPU_KERNELS_H

#include "kernels/kernel.h"

#endif
