/* Process-wide settings: threads, the clock, random seeds. */
#ifndef TLUA_RUNTIME_H
#define TLUA_RUNTIME_H

#include <stdint.h>

#include "tlua/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads used by OpenBLAS and the engine's own CPU loops (OpenMP). */
tl_status tl_set_num_threads(int n);
int tl_get_num_threads(void);

/* Monotonic wall time in seconds (CLOCK_MONOTONIC, nanosecond resolution). */
double tl_clock(void);

/* Seeds the global generator used by rand, randn, randint, randperm. */
void tl_manual_seed(uint64_t seed);

/* float32 matrix products on CUDA: "highest" (the default) computes in full float32;
   "high" lets cuBLAS use TF32 tensor cores (10-bit mantissa products, float32
   accumulation). Other dtypes and the CPU are not affected. */
tl_status tl_set_matmul_precision(const char *precision);
/* "highest" or "high". */
const char *tl_get_matmul_precision(void);

#ifdef __cplusplus
}
#endif

#endif
