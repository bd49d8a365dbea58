/* Internal: the CPU kernels' element conversions, which are core/half.h's (one source for
   dtype.c, the CPU and the CUDA kernels). */
#ifndef TLUA_CPU_CONVERT_H
#define TLUA_CPU_CONVERT_H

#include "core/half.h"

#endif
