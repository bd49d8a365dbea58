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

/* What the CPU storage allocator holds: bytes of the live tensors' storages
   (as requested, before alignment), their highest value since the last reset,
   and the counts of storages made and freed. */
typedef struct tl_cpu_memory_stats {
    uint64_t allocated_bytes;
    uint64_t peak_allocated_bytes;
    uint64_t active_blocks;
    uint64_t alloc_count;
    uint64_t free_count;
} tl_cpu_memory_stats;

void tl_cpu_get_memory_stats(tl_cpu_memory_stats *out);
/* The peak restarts from the current allocated_bytes. */
void tl_cpu_reset_peak_memory_stats(void);

#ifdef __cplusplus
}
#endif

#endif
